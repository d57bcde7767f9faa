// File: needle.cc — the needle study (needle.h, docs/needle.md).
#include "oracle/needle.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "oracle/logits_bound.h"
#include "oracle/parallel.h"
#include "oracle/study_internal.h"
#include "reference/error.h"
#include "reference/pipeline.h"
#include "reference/score.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;
using ref::Recipe;
using namespace study_detail;

// A recipe's query and its scores of the unmodified keys (the needle replaces one).
struct Scored {
  const Recipe* recipe;
  ref::PreparedQuery query;
  std::vector<double> scores;
};

// A recipe on the device (study_device.h): the context's sequence (stored by the key kernel
// together with the cases' needles, in device_outcomes) and the query, and what the
// reference's checks of the context and the cases need.
struct OnDevice {
  StageKernels kernels;
  std::unique_ptr<DeviceSequence> sequence;
  dev::HostQueryResult query;
  ref::QueryOutput reference_query;
  std::unique_ptr<ref::KeyMatrix> keys;  // the recipe's keys (bounded contract: the exact scores and bounds)
  LogitsExpectation expectation;         // of the unmodified keys
  std::vector<int64_t> checked_cases;    // case numbers (depth-major, then margin) the reference rechecks
  std::vector<int64_t> checked_slots;    // positions of the context whose stored keys the reference rechecks
  std::string where;                     // the context, trial and recipe, for the checks' messages
};

double single_score(const Recipe& r, const ref::PreparedQuery& q, const ref::StoredHead& head) {
  ref::KeyMatrix one;
  one.append(head);
  return ref::index_scores(q, one, 1, r.score)[0];
}

// A case of one context and trial waiting for its recipe's device batch: where its
// outcome goes and what the reference's checks of it need.
struct PlantedCase {
  size_t case_index = 0;     // in the study's cases
  size_t outcome_index = 0;  // in that case's recipes
  int64_t case_number = 0;   // depth-major, then margin (OnDevice::checked_cases)
  std::vector<float> needle;  // the needle's key input [128]
  ref::StoredHead needle_key;
  double s_needle = 0.0;     // the recipe's CPU score of the needle
};

// A recipe's outcomes on the device for the cases of one context and trial, in one call a
// stage (a batch of rows, not a launch a case): the context's keys and every case's needle
// key stored by one key-kernel call (case c's cache is the context's with its needle at its
// position), one logits row a case over all n keys, the top-K kernel's selection of every
// row; rank and score from the kernel's logits, retained from its top-K. The reference
// rechecks the context's sampled cache slots. Every case's logits must be free of NaN and
// its top-K entries valid; in the sampled cases the reference rechecks the needle's cache
// slot, the whole logits row (the CPU's scores with the needle's at p) and the top-K row
// under its contract.
void device_outcomes(const NeedleConfig& config, const OnDevice& d, const Recipe& recipe,
                     const ActivationSource& acts, const ref::RopeTable& table, const std::vector<double>& cpu_scores,
                     const std::vector<PlantedCase>& planted_cases, std::vector<NeedleCase>& cases) {
  const int K = config.topk;
  const int64_t n = d.sequence->size();
  const auto where_of = [&](const NeedleCase& c) {
    return fmt::format("needle --device gpu, context {}, trial {}, depth {}, margin {}, recipe {}", n, c.trial,
                       c.depth, c.margin, recipe.name);
  };
  std::vector<int64_t> positions;
  std::vector<float> inputs;
  for (const PlantedCase& pc : planted_cases) {
    positions.push_back(cases[pc.case_index].position);
    inputs.insert(inputs.end(), pc.needle.begin(), pc.needle.end());
  }
  const DeviceSequence::PlantedKeys planted = d.sequence->plant_keys(positions, inputs.data());
  // The context's pages come first in the planted cache, through the identity table.
  std::vector<float> slot_inputs(d.checked_slots.size() * kHeadDim);
  for (size_t i = 0; i < d.checked_slots.size(); ++i) {
    acts.key_input(d.checked_slots[i], slot_inputs.data() + i * kHeadDim);
  }
  check_key_slots(d.where, recipe, acts, table, planted.cache, d.sequence->page_size(), d.checked_slots, slot_inputs);
  if (planted_cases.empty()) return;
  const std::vector<float> logits = d.sequence->logits(planted, d.query);
  for (size_t i = 0; i < planted_cases.size(); ++i) {
    check_no_nan(where_of(cases[planted_cases[i].case_index]), logits.data() + i * n, n);
  }
  const std::vector<int32_t> top =
      d.sequence->topk(logits, std::vector<int32_t>(planted_cases.size(), static_cast<int32_t>(n)), K);
  for (size_t i = 0; i < planted_cases.size(); ++i) {
    const PlantedCase& pc = planted_cases[i];
    NeedleCase& c = cases[pc.case_index];
    const std::string where = where_of(c);
    const int64_t p = c.position;
    const float* row = logits.data() + i * n;
    const int32_t* top_row = top.data() + i * K;
    canonical_selection(where, row, n, K, top_row);  // valid entries, no duplicates
    if (std::binary_search(d.checked_cases.begin(), d.checked_cases.end(), pc.case_number)) {
      check_key_slots(where + ", the needle", recipe, acts, table, planted.cache, d.sequence->page_size(), {p},
                      pc.needle, planted.table_of(static_cast<int64_t>(i)));
      LogitsExpectation e = d.expectation;
      if (d.kernels.logits_exact_order) {
        e.expected = cpu_scores;
        e.expected[p] = pc.s_needle;
      } else {
        ref::KeyMatrix one;
        one.append(pc.needle_key);
        const ref::PreparedQuery prepared = ref::prepare_query(d.reference_query.heads, d.reference_query.weights);
        e.exact[p] = ref::index_scores(prepared, one, 1, ref::ScoreAccum::kExact)[0];
        e.bound[p] = bounded_logit_error(recipe.key_quant.format, static_cast<int>(d.reference_query.heads.size()),
                                         pc.needle_key.dot_scale,
                                         weighted_magnitude(d.reference_query, pc.needle_key.dot_values.data()));
      }
      check_logits_row(where, d.kernels.logits_exact_order, row, n, n, e.expected, e.exact, e.bound);
      check_topk_row(where, d.kernels, row, n, K, top_row);
    }
    const float score = row[p];
    int64_t rank = 1;  // higher score first, then lower index (topk.h)
    for (int64_t s = 0; s < n; ++s) {
      if (s != p && (row[s] > score || (row[s] == score && s < p))) ++rank;
    }
    const int64_t m = std::min<int64_t>(K, n);
    const bool retained = std::find(top_row, top_row + m, static_cast<int32_t>(p)) != top_row + m;
    c.recipes[pc.outcome_index] = {recipe.name, rank, retained, static_cast<double>(score)};
  }
}

// The cases of one context and trial for the recipes that share one exact oracle
// (`members`), appended to `cases` per depth and margin.
void study_model(const NeedleConfig& config, const std::vector<const Recipe*>& members,
                 const ActivationSource& acts, int64_t n, int trial, RopeTables& rope, const InputRounding& rounding,
                 std::vector<NeedleCase>& cases) {
  const int K = config.topk;
  const int64_t t = n - 1;  // the query is the last token and sees every key
  // Its input: token t's, or in the planted-fact mode the reference context's last token's
  // at every N (one question, asked at the end of contexts of every length).
  const int64_t query_input = config.reference_context > 0 ? std::min(n, config.reference_context) - 1 : t;
  const Recipe exact = ref::exact_of(*members.front());
  const ref::RopeTable& exact_table = rope.get(exact.rope.table);
  std::vector<std::string> model_names;
  for (const Recipe* r : members) model_names.push_back(r->name);
  const ref::KeyMatrix exact_keys = build_keys(exact, acts, n, exact_table, config.threads);
  const ref::PreparedQuery exact_q = build_query(exact, acts, query_input, t, exact_table);
  const std::vector<double> exact_scores = index_scores(exact_q, exact_keys, n, exact.score, config.threads);
  std::vector<Scored> scored;
  std::vector<OnDevice> on_device;
  const StudyDevice& device = config.device;
  const int64_t cases_per_model = static_cast<int64_t>(config.depths.size() * config.margins.size());
  for (const Recipe* r : members) {
    const ref::RopeTable& table = rope.get(r->rope.table);
    ref::KeyMatrix keys = build_keys(*r, acts, n, table, config.threads);
    ref::PreparedQuery q = build_query(*r, acts, query_input, t, table);
    std::vector<double> s = index_scores(q, keys, n, r->score, config.threads);
    if (device.kernel != nullptr) {
      OnDevice d;
      d.kernels = stage_kernels(device, *r, K, *std::max_element(config.contexts.begin(), config.contexts.end()),
                                    kNeedlePageSize);
      d.sequence = std::make_unique<DeviceSequence>(d.kernels, *r, acts, n, kNeedlePageSize, table, device.timings,
                                                    DeviceSequence::ContextStore::kWithPlants);
      d.query = d.sequence->queries({query_input}, {t});
      const int H = acts.num_heads();
      std::vector<float> q_in(static_cast<size_t>(H) * kHeadDim), wproj(H);
      acts.query_input(query_input, q_in.data(), wproj.data());
      d.reference_query = ref::run_query_path(*r, q_in.data(), H, wproj.data(), static_cast<int>(t), table);
      d.where = fmt::format("needle --device gpu, context {}, trial {}, recipe {}", n, trial, r->name);
      if (device.check_rows > 0) check_query_row(d.where, *r, d.query, 0, d.reference_query);
      const uint64_t sample_seed = static_cast<uint64_t>(trial) * 1000003ull + static_cast<uint64_t>(n) * 131ull +
                                   static_cast<uint64_t>(scored.size());
      d.checked_slots = sample_rows(n, device.check_keys, sample_seed);  // checked once the keys are stored
      d.checked_cases = sample_rows(cases_per_model, device.check_rows, sample_seed + 1);
      if (!d.kernels.logits_exact_order && !d.checked_cases.empty()) {
        d.expectation = expect_logits(*r, false, d.reference_query, keys, n, config.threads);
      }
      d.keys = std::make_unique<ref::KeyMatrix>(std::move(keys));
      on_device.push_back(std::move(d));
    }
    scored.push_back({r, std::move(q), std::move(s)});
  }
  int64_t case_number = -1;
  std::vector<std::vector<PlantedCase>> planted(on_device.size());  // a recipe's cases on the device
  for (double depth : config.depths) {
    const int64_t p = std::llround(depth * static_cast<double>(n - 1));
    // tau: the K-th largest exact score among the other keys (of the reference window,
    // positions [n - R, n), when the config names one); sigma: their std.
    const int64_t window_begin = config.reference_context > 0 ? std::max<int64_t>(0, n - config.reference_context) : 0;
    std::vector<double> others;
    others.reserve(n - window_begin);
    for (int64_t s = window_begin; s < n; ++s) {
      if (s != p) others.push_back(exact_scores[s]);
    }
    const int64_t k_eff = std::min<int64_t>(K, static_cast<int64_t>(others.size()));
    std::nth_element(others.begin(), others.begin() + (k_eff - 1), others.end(), std::greater<>());
    const double tau = others[k_eff - 1];
    const double mean = std::accumulate(others.begin(), others.end(), 0.0) / others.size();
    double var = 0.0;
    for (double v : others) var += (v - mean) * (v - mean);
    const double sigma = std::sqrt(var / others.size());
    float original[kHeadDim], base[kHeadDim], donor_in[kHeadDim], needle[kHeadDim];
    acts.key_input(p, original);
    // The donor: of the kDonorCandidates keys with the highest exact scores at their
    // own positions, the one that scores highest when placed at position p (RoPE
    // makes a key's score depend on where it sits).
    constexpr int kDonorCandidates = 1024;
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    const int64_t candidates = std::min<int64_t>(kDonorCandidates, n);
    std::partial_sort(order.begin(), order.begin() + candidates, order.end(),
                      [&](int64_t a, int64_t b) { return exact_scores[a] > exact_scores[b]; });
    double donor_score = -INFINITY;
    for (int64_t c = 0; c < candidates; ++c) {
      if (order[c] == p) continue;
      float candidate[kHeadDim];
      acts.key_input(order[c], candidate);
      const double at_p = single_score(exact, exact_q, key_of(exact, acts, candidate, p, exact_table));
      if (at_p > donor_score) {
        donor_score = at_p;
        std::copy(candidate, candidate + kHeadDim, donor_in);
      }
    }
    // The needle's input (rounded as the device mode rounds every key input).
    const auto needle_input = [&](double beta) {
      for (int i = 0; i < kHeadDim; ++i) {
        needle[i] = static_cast<float>((1.0 - beta) * base[i] + beta * donor_in[i]);
      }
      round_key_input(rounding, needle);
    };
    const auto exact_needle_score = [&](double beta) {
      needle_input(beta);
      return single_score(exact, exact_q, key_of(exact, acts, needle, p, exact_table));
    };
    // If even the best candidate falls short of the largest target, climb: coordinate
    // ascent on the donor input (deterministic steps, shrinking), keeping improvements.
    const double highest_target =
        tau + *std::max_element(config.margins.begin(), config.margins.end()) * sigma;
    double step = 0.0;
    for (float v : donor_in) step = std::max(step, static_cast<double>(std::fabs(v)));
    for (int it = 0; it < 4096 && donor_score < highest_target; ++it) {
      const int i = it % kHeadDim;
      if (i == 0 && it > 0) step *= 0.7;
      for (double sign : {1.0, -1.0}) {
        float trial_in[kHeadDim];
        std::copy(donor_in, donor_in + kHeadDim, trial_in);
        trial_in[i] = static_cast<float>(trial_in[i] + sign * step);
        const double at_p = single_score(exact, exact_q, key_of(exact, acts, trial_in, p, exact_table));
        if (at_p > donor_score) {
          donor_score = at_p;
          std::copy(trial_in, trial_in + kHeadDim, donor_in);
          break;
        }
      }
    }
    // A low base: the original key at p, or, when that already scores high, the
    // lowest-scoring (at p) of the kDonorCandidates lowest-scoring keys.
    float low_base[kHeadDim];
    std::copy(original, original + kHeadDim, low_base);
    const double original_score = single_score(exact, exact_q, key_of(exact, acts, original, p, exact_table));
    double low_score = original_score;
    std::partial_sort(order.begin(), order.begin() + candidates, order.end(),
                      [&](int64_t a, int64_t b) { return exact_scores[a] < exact_scores[b]; });
    for (int64_t c = 0; c < candidates; ++c) {
      float candidate[kHeadDim];
      acts.key_input(order[c], candidate);
      const double at_p = single_score(exact, exact_q, key_of(exact, acts, candidate, p, exact_table));
      if (at_p < low_score) {
        low_score = at_p;
        std::copy(candidate, candidate + kHeadDim, low_base);
      }
    }
    for (double margin : config.margins) {
      ++case_number;
      const double target = tau + margin * sigma;
      // Start from the original key when it lies below the target.
      const float* start = original_score < target ? original : low_base;
      std::copy(start, start + kHeadDim, base);
      // Bracket f(lo) < target <= f(hi) along base -> donor, then bisect.
      // The interpolation may extrapolate up to 64x past either end.
      double lo = 0.0, hi = 1.0;
      while (exact_needle_score(lo) >= target && lo > -64.0) lo = lo * 2.0 - 1.0;
      while (exact_needle_score(hi) < target && hi < 64.0) hi *= 2.0;
      NeedleCase record;
      record.context = n;
      record.trial = trial;
      record.depth = depth;
      record.position = p;
      record.margin = margin;
      record.tau = tau;
      record.sigma = sigma;
      record.reference_keys = static_cast<int64_t>(others.size());
      record.model_recipes = model_names;
      if (exact_needle_score(hi) < target || exact_needle_score(lo) >= target) {
        record.reachable = false;
        record.best_exact_score_found = std::max(exact_needle_score(hi), donor_score);
        record.lowest_exact_score_found = std::min(exact_needle_score(lo), low_score);
        cases.push_back(std::move(record));
        continue;
      }
      for (int it = 0; it < 60; ++it) {
        const double mid = 0.5 * (lo + hi);
        (exact_needle_score(mid) >= target ? hi : lo) = mid;
      }
      const double needle_exact = exact_needle_score(hi);  // leaves `needle` at hi
      record.reachable = true;
      record.beta = hi;
      record.needle_exact_score = needle_exact;
      record.achieved_margin = (needle_exact - tau) / sigma;
      int64_t exact_rank = 1;
      for (int64_t s = 0; s < n; ++s) {
        if (s != p && (exact_scores[s] > needle_exact || (exact_scores[s] == needle_exact && s < p))) ++exact_rank;
      }
      record.exact_rank = exact_rank;
      for (size_t m = 0; m < scored.size(); ++m) {
        const Scored& sc = scored[m];
        const ref::RopeTable& table = rope.get(sc.recipe->rope.table);
        const ref::StoredHead needle_key = key_of(*sc.recipe, acts, needle, p, table);
        const double s_needle = single_score(*sc.recipe, sc.query, needle_key);
        if (device.kernel == nullptr) {
          int64_t rank = 1;  // higher score first, then lower index (topk.h)
          for (int64_t s = 0; s < n; ++s) {
            if (s == p) continue;
            if (sc.scores[s] > s_needle || (sc.scores[s] == s_needle && s < p)) ++rank;
          }
          record.recipes.push_back({sc.recipe->name, rank, rank <= K, s_needle});
          continue;
        }
        // Filled in by the recipe's device batch after the last depth.
        planted[m].push_back({cases.size(), record.recipes.size(), case_number,
                              std::vector<float>(needle, needle + kHeadDim), needle_key, s_needle});
        record.recipes.push_back({sc.recipe->name, 0, false, 0.0});
      }
      cases.push_back(std::move(record));
    }
  }
  for (size_t m = 0; m < on_device.size(); ++m) {
    const Scored& sc = scored[m];
    device_outcomes(config, on_device[m], *sc.recipe, acts, rope.get(sc.recipe->rope.table), sc.scores, planted[m],
                    cases);
  }
}

// The outcome of recipe `name` in a case, or nullptr when the recipe is not one of the
// case's model recipes. With two recipes of one name the later one counts (as the
// result files, which key outcomes by name, keep it).
const NeedleOutcome* outcome_of(const NeedleCase& c, const std::string& name) {
  const NeedleOutcome* found = nullptr;
  for (const NeedleOutcome& o : c.recipes) {
    if (o.recipe == name) found = &o;
  }
  return found;
}

}  // namespace

int64_t needle_peak_bytes(const NeedleConfig& config) {
  if (config.contexts.empty()) return kStudyBaseBytes;
  const int64_t n = *std::max_element(config.contexts.begin(), config.contexts.end());
  const int64_t members = static_cast<int64_t>(config.recipes.size());
  // The device mode keeps each recipe's key matrix and bounded expectation (exact scores
  // and bounds) for the checks of its cases, and a cache a recipe (an upper bound: one
  // recipe's planted cache is alive at a time), and runs a context and trial's cases as
  // one batch of rows: their logits rows, a page table each (three copies: the planted
  // caches', the key batch's, the logits batch's), a page of the widest row each, and the
  // key inputs of each case's page (fp32, and the key batch's copy) beside the context's.
  const int64_t cases = static_cast<int64_t>(config.depths.size() * config.margins.size());
  const int64_t tables = 3 * cases * (n / kNeedlePageSize + 1) * 4;
  const int64_t device = config.device.kernel != nullptr
                             ? members * (n * kKeyMatrixBytesPerKey + n * 512 + 2 * n * 8) +
                                   device_study_bytes(n, cases) + tables + cases * kNeedlePageSize * 512 +
                                   2 * cases * kNeedlePageSize * kHeadDim * 4
                             : 0;
  return 2 * n * kKeyMatrixBytesPerKey + (members + 4) * n * 8 +
         distinct_rope_tables(config.recipes) * n * kRopeBytesPerPosition + kStudyBaseBytes + device;
}

void check_needle_layout(const NeedleLayout& layout, ErrorKind kind) {
  const auto refuse = [kind](const std::string& why) { throw Error(kind, "needle: " + why); };
  if (layout.recipes.empty()) refuse("recipes: none");
  if (layout.contexts.empty()) refuse("contexts: none");
  for (const int64_t n : layout.contexts) {
    if (n < 2) refuse(fmt::format("contexts: {} is not >= 2", n));
  }
  if (layout.depths.empty()) refuse("depths: none");
  for (const double d : layout.depths) {
    if (!(d >= 0.0 && d <= 1.0)) refuse(fmt::format("depths: {} is not in [0, 1]", d));
  }
  if (layout.margins.empty()) refuse("margins: none");
  for (const double m : layout.margins) {
    if (!(m >= 0.0 && std::isfinite(m))) refuse(fmt::format("margins: {} is not a finite number >= 0 sigma", m));
  }
  if (layout.trials < 1) refuse(fmt::format("trials: {} is not >= 1", layout.trials));
  if (layout.topk < 1) refuse(fmt::format("topk: {} is not >= 1", layout.topk));
  if (layout.reference_context != 0 && layout.reference_context < 2) {
    refuse(fmt::format("reference_context: {} is not >= 2 (or 0: each needle's own context)",
                       layout.reference_context));
  }
}

NeedleLayout needle_layout(const NeedleConfig& config) {
  if (config.trials < 1) throw Error(ErrorKind::kUsage, fmt::format("needle: trials: {} is not >= 1", config.trials));
  check_contexts_fit(config.source, config.contexts, "needle");
  NeedleLayout layout;
  layout.topk = config.topk;
  layout.depths = config.depths;
  layout.margins = config.margins;
  layout.reference_context = config.reference_context;
  // A fixture's activations are the same in every trial: one trial.
  layout.trials = config.source ? 1 : config.trials;
  layout.activations = describe_activations(config.source, config.activations);
  layout.contexts = config.contexts;
  for (const Recipe& r : config.recipes) layout.recipes.push_back(r.name);
  check_needle_layout(layout, ErrorKind::kUsage);
  if (config.device.kernel != nullptr) {
    layout.device = describe_device(config.device, config.recipes, config.topk,
                                    *std::max_element(config.contexts.begin(), config.contexts.end()),
                                    kNeedlePageSize);
  }
  return layout;
}

std::vector<NeedleUnit> needle_units(const NeedleLayout& layout) {
  std::vector<NeedleUnit> units;
  units.reserve(needle_unit_count(layout));
  for (const int64_t n : layout.contexts) {
    for (int trial = 1; trial <= layout.trials; ++trial) units.push_back({n, trial});
  }
  return units;
}

uint64_t needle_unit_count(const NeedleLayout& layout) {
  return static_cast<uint64_t>(layout.contexts.size()) * static_cast<uint64_t>(std::max(layout.trials, 0));
}

std::vector<NeedleUnitResult> run_needle_units(const NeedleConfig& config, const std::vector<NeedleUnit>& units,
                                               const Progress& progress) {
  // The tables of the longest context of the study, whichever units run here.
  const int64_t longest = *std::max_element(config.contexts.begin(), config.contexts.end());
  RopeTables rope(longest);
  // In the device mode, every input the kernels take in bf16 is rounded for all (the
  // oracle and the needle search included).
  const InputRounding rounding = config.device.kernel != nullptr
                                     ? input_rounding(config.device, config.recipes, config.topk, longest, kNeedlePageSize)
                                     : InputRounding{};
  // Group recipes by oracle: the needle is built against the oracle's scores.
  std::map<std::string, std::vector<const Recipe*>> by_model;
  for (const Recipe& r : config.recipes) by_model[exact_model_key(r)].push_back(&r);
  const int64_t total = static_cast<int64_t>(units.size());
  int64_t done = 0;
  std::vector<NeedleUnitResult> results;
  for (const NeedleUnit& unit : units) {
    const std::shared_ptr<const ActivationSource> source = rounded_inputs(
        activations_for(config.source, config.activations,
                        config.activations.seed * 1000003ull + static_cast<uint64_t>(unit.trial)),
        rounding);
    NeedleUnitResult result;
    result.unit = unit;
    for (const auto& [model, members] : by_model) {
      study_model(config, members, *source, unit.context, unit.trial, rope, rounding, result.cases);
    }
    results.push_back(std::move(result));
    if (progress) progress(++done, total);
  }
  return results;
}

namespace {

// A case of a unit result is one the layout's study makes (kBadInput otherwise: the results
// may come from a shard file): its depth and margin are the layout's, its needle lies in
// its context, and each recipe's outcome is a layout recipe's with a rank in 1..context.
// (Retention is not rank <= K in the device mode, where it is the top-K kernel's.)
void check_case(const NeedleLayout& layout, const NeedleCase& c) {
  const auto holds = [](const auto& values, const auto& v) {
    return std::find(values.begin(), values.end(), v) != values.end();
  };
  const std::string where = fmt::format("needle: a case of context {} trial {}", c.context, c.trial);
  if (!holds(layout.depths, c.depth) || !holds(layout.margins, c.margin)) {
    throw_bad_input(fmt::format("{} has depth {} and margin {}, not the study's", where, c.depth, c.margin));
  }
  if (c.position < 0 || c.position >= c.context) {
    throw_bad_input(fmt::format("{} has its needle at position {}, outside the context", where, c.position));
  }
  for (const NeedleOutcome& o : c.recipes) {
    if (!holds(layout.recipes, o.recipe)) {
      throw_bad_input(fmt::format("{} has an outcome of '{}', which the study does not hold", where, o.recipe));
    }
    if (o.rank < 1 || o.rank > c.context) {
      throw_bad_input(fmt::format("{} ranks '{}' at {}, outside 1..{}", where, o.recipe, o.rank, c.context));
    }
  }
}

}  // namespace

NeedleResult reduce_needle(const NeedleLayout& layout, const std::vector<NeedleUnitResult>& units) {
  check_needle_layout(layout, ErrorKind::kBadInput);
  const std::vector<NeedleUnit> expected = needle_units(layout);
  if (units.size() != expected.size()) {
    throw_bad_input("needle: " + std::to_string(units.size()) + " unit results for the " +
                    std::to_string(expected.size()) + " units of the study");
  }
  NeedleResult result;
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].unit.context != expected[u].context || units[u].unit.trial != expected[u].trial) {
      throw_bad_input("needle: unit " + std::to_string(u) + " (context " + std::to_string(units[u].unit.context) +
                      ", trial " + std::to_string(units[u].unit.trial) + ") is not unit " + std::to_string(u) +
                      " of the study (context " + std::to_string(expected[u].context) + ", trial " +
                      std::to_string(expected[u].trial) + ")");
    }
    for (const NeedleCase& c : units[u].cases) check_case(layout, c);
    result.cases.insert(result.cases.end(), units[u].cases.begin(), units[u].cases.end());
  }

  // Retention per (recipe, context, margin) over depths x trials.
  for (const std::string& name : layout.recipes) {
    for (int64_t n : layout.contexts) {
      for (double margin : layout.margins) {
        NeedleSummaryRow row;
        row.recipe = name;
        row.context = n;
        row.margin = margin;  // row.unreachable stays 0 (NeedleSummaryRow says why)
        int64_t kept = 0;
        std::vector<double> ranks;
        for (const NeedleCase& c : result.cases) {
          if (c.context != n || c.margin != margin || !c.reachable) continue;
          const NeedleOutcome* o = outcome_of(c, name);
          if (o == nullptr) continue;
          ++row.cases;
          kept += o->retained;
          ranks.push_back(static_cast<double>(o->rank));
        }
        std::sort(ranks.begin(), ranks.end());
        row.retention = row.cases ? static_cast<double>(kept) / row.cases : 0.0;
        row.rank_p50 = ranks.empty() ? 0.0 : ranks[(ranks.size() - 1) / 2];
        row.rank_worst = ranks.empty() ? 0.0 : ranks.back();
        result.summary.push_back(std::move(row));
      }
    }
  }
  result.layout = layout;
  return result;
}

NeedleResult run_needle(const NeedleConfig& config, const Progress& progress) {
  const NeedleLayout layout = needle_layout(config);
  return reduce_needle(layout, run_needle_units(config, needle_units(layout), progress));
}

}  // namespace dsaf::oracle
