// File: verify_scoring.cc — the scoring and selection stages of `verify` (verify.h):
// paged logits on caches and queries the reference itself produced (decode rows and
// ragged causal-prefill rows, every page-size class), and top-K on random, tie-heavy and
// near-equal rows. Exact-order logits compare bit for bit; bounded logits must lie within
// the contract's bound of the exact (fp64) score on every score (oracle/logits_bound.h),
// every row past it is reported with how far, and their top-K recall is reported. Top-K
// rows are judged under the kernel's contract (oracle/topk_verdict.h), every differing
// row classified.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "oracle/logits_bound.h"
#include "oracle/topk_metrics.h"
#include "oracle/topk_verdict.h"
#include "oracle/verify.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/rope.h"
#include "reference/score.h"
#include "reference/topk.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;

uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

void gaussian_row(std::mt19937_64& rng, float* out, float scale) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < kHeadDim; ++i) out[i] = normal(rng) * (i % 29 == 3 ? 20.0f * scale : scale);
}

// One logits batch: the kernel's inputs and, per row, the reference scores (the recipe's
// accumulation), the exact ones, and the bounded contract's limit on each score's error.
struct LogitsCase {
  dev::HostLogitsBatch host;
  std::vector<std::vector<double>> expected, exact, error_bound;
};

LogitsCase make_logits_case(std::mt19937_64& rng, const ref::Recipe& recipe, int page_size, int heads, bool prefill) {
  const int kMaxLen = 600;
  const ref::RopeTable rope(recipe.rope.table, kMaxLen);
  std::vector<float> nw(kHeadDim, 1.0f), nb(kHeadDim, 0.0f);
  const ref::NormParams norm{nw.data(), nb.data()};
  LogitsCase c;
  dev::HostLogitsBatch& h = c.host;
  const int seqs = std::uniform_int_distribution<int>(1, 4)(rng);
  std::vector<int64_t> lens;
  for (int s = 0; s < seqs; ++s) lens.push_back(std::uniform_int_distribution<int64_t>(4, kMaxLen)(rng));
  const int64_t longest = *std::max_element(lens.begin(), lens.end());
  h.page_table_stride = (longest + page_size - 1) / page_size;
  const int64_t pages = h.page_table_stride * seqs + 2;
  std::vector<int32_t> pool(pages);
  for (int64_t p = 0; p < pages; ++p) pool[p] = static_cast<int32_t>(p);
  std::shuffle(pool.begin(), pool.end(), rng);
  h.page_tables.assign(pool.begin(), pool.begin() + h.page_table_stride * seqs);
  h.page_size = page_size;
  h.k_format = recipe.key_quant.format;
  h.q_format = recipe.query_quant.format;
  h.accum = recipe.score;
  h.num_heads = heads;
  h.max_context = longest + 7;
  const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
  h.cache.assign(pages * layout.page_bytes(), 0);
  std::vector<ref::KeyMatrix> keys(seqs);
  std::vector<float> row(kHeadDim);
  for (int s = 0; s < seqs; ++s) {
    const std::vector<int32_t> table(h.page_tables.begin() + s * h.page_table_stride,
                                     h.page_tables.begin() + (s + 1) * h.page_table_stride);
    for (int64_t p = 0; p < lens[s]; ++p) {
      gaussian_row(rng, row.data(), 1.0f);
      const ref::StoredHead k = ref::run_key_path(recipe, row.data(), static_cast<int>(p), norm, rope);
      layout.store(h.cache, layout.locate(table, p, pages), k);
      keys[s].append(k);
    }
    const int queries = prefill ? std::uniform_int_distribution<int>(1, 4)(rng) : 2;
    for (int j = 0; j < queries; ++j) {
      h.row_seq.push_back(s);
      h.row_valid.push_back(static_cast<int32_t>(
          prefill ? std::uniform_int_distribution<int64_t>(1, lens[s])(rng) : lens[s] - queries + j + 1));
    }
  }
  std::vector<float> q_in(static_cast<size_t>(heads) * kHeadDim), wproj(heads);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t r = 0; r < h.row_seq.size(); ++r) {
    for (int i = 0; i < heads; ++i) gaussian_row(rng, q_in.data() + i * kHeadDim, 1.0f);
    for (float& w : wproj) w = normal(rng);
    const ref::QueryOutput q = ref::run_query_path(recipe, q_in.data(), heads, wproj.data(), h.row_valid[r] - 1, rope);
    for (int i = 0; i < heads; ++i) {
      h.q_values.insert(h.q_values.end(), q.heads[i].value_bytes.begin(), q.heads[i].value_bytes.end());
      h.q_scales.insert(h.q_scales.end(), q.heads[i].scale_bytes.begin(), q.heads[i].scale_bytes.end());
      h.weights.push_back(static_cast<float>(q.weights[i]));
    }
    const ref::PreparedQuery prepared = ref::prepare_query(q.heads, q.weights);
    const ref::KeyMatrix& k = keys[h.row_seq[r]];
    c.expected.push_back(ref::index_scores(prepared, k, h.row_valid[r], recipe.score));
    c.exact.push_back(ref::index_scores(prepared, k, h.row_valid[r], ref::ScoreAccum::kExact));
    // W = sum_h |w_h| sum_d |q_hd k_d| per key, for the bound (infinite where none is derived)
    std::vector<double> bound(h.row_valid[r], HUGE_VAL);
    const bool derived = logit_bound_derived_for(recipe.key_quant.format, recipe.score);
    for (int64_t s = 0; derived && s < h.row_valid[r]; ++s) {
      const double weighted = weighted_magnitude(q, k.dot_values.data() + s * kHeadDim);
      bound[s] = bounded_logit_error(recipe.key_quant.format, heads, k.dot_scales[s], weighted);
    }
    c.error_bound.push_back(std::move(bound));
  }
  return c;
}

// A logits row that breaks its contract: how many scores, and the worst.
struct LogitsRowFailure {
  std::string where;   // batch, page size, layout, row
  int64_t scores = 0;  // breaking the contract in the row
  std::string worst;   // the worst score: key, value, reference / exact, excess over the bound
  double excess = 0.0;  // error / bound of the worst (bounded contract)
};

void verify_paged_logits(const dev::KernelUnderTest& kernel, const dev::KernelCapabilities& caps,
                         const VerifyConfig& config, std::mt19937_64& rng, VerifyReport& report) {
  const ref::Recipe& recipe = config.recipe;
  nlohmann::json stage = {{"stage", "paged logits"}};
  if (!caps.paged_logits) {
    report.text += "paged logits: not provided by the kernel\n";
    return;
  }
  if (recipe.score == ref::ScoreAccum::kExact) {
    report.text += "paged logits: skipped (the recipe scores in fp64; no kernel contract)\n";
    return;
  }
  const int heads = config.num_heads == 8 || config.num_heads == 16 || config.num_heads == 32 ? config.num_heads : 64;
  const bool exact_order = caps.logits_exact_order;
  int64_t rows = 0, scores = 0;
  double worst_relative = 0.0, worst_bound_fraction = 0.0, recall_sum = 0.0;
  std::vector<LogitsRowFailure> failures;
  const int page_sizes[] = {1, 2, 16, 64, 128, 256};
  for (int i = 0; i < 6; ++i) {
    if (config.progress) config.progress("paged logits", i, 6);
    if (!caps.takes_page_size(page_sizes[i]) && caps.key_store) continue;  // a key kernel's pages only
    const bool prefill = i % 2 == 1;
    const LogitsCase c = make_logits_case(rng, recipe, page_sizes[i], heads, prefill);
    const std::vector<float> got = kernel.paged_logits(c.host);
    for (size_t r = 0; r < c.expected.size(); ++r) {
      const int64_t valid = c.host.row_valid[r];
      const float* row = got.data() + r * c.host.max_context;
      double row_max = 0.0, row_error = 0.0;
      LogitsRowFailure failure;
      failure.where = "batch " + std::to_string(i) + " (page size " + std::to_string(page_sizes[i]) + ", " +
                      (prefill ? "prefill" : "decode") + "), row " + std::to_string(r);
      for (int64_t s = 0; s < c.host.max_context; ++s) {
        const std::string key = "key " + std::to_string(s);
        if (s >= valid) {
          if (!(std::isinf(row[s]) && row[s] < 0)) {
            if (failure.scores++ == 0) failure.worst = key + ": a masked key is not -inf";
          }
          continue;
        }
        const float want = static_cast<float>(c.expected[r][s]);
        if (exact_order) {
          if (bits_of(want) != bits_of(row[s]) && !(std::isnan(want) && std::isnan(row[s]))) {
            if (failure.scores++ == 0) {
              char text[160];
              std::snprintf(text, sizeof text, "%s: %.9g (0x%08x) against the reference's %.9g (0x%08x)", key.c_str(),
                            static_cast<double>(row[s]), bits_of(row[s]), static_cast<double>(want), bits_of(want));
              failure.worst = text;
            }
          }
        } else {
          const double error = std::fabs(row[s] - c.exact[r][s]), bound = c.error_bound[r][s];
          row_max = std::max(row_max, std::fabs(c.exact[r][s]));
          row_error = std::max(row_error, error);
          if (bound > 0) worst_bound_fraction = std::max(worst_bound_fraction, error / bound);
          if (!(error <= bound)) {  // NaN and infinities fail too
            ++failure.scores;
            const double excess = bound > 0 ? error / bound : HUGE_VAL;
            if (!(excess <= failure.excess)) {
              failure.excess = excess;
              char text[200];
              std::snprintf(text, sizeof text, "%s: %.9g is %.3g from the exact score %.9g, %.3gx the bound %.3g",
                            key.c_str(), static_cast<double>(row[s]), error, c.exact[r][s], excess, bound);
              failure.worst = text;
            }
          }
        }
        ++scores;
      }
      if (failure.scores > 0) failures.push_back(failure);
      if (!exact_order && valid > 0) {
        if (row_max > 0) worst_relative = std::max(worst_relative, row_error / row_max);
        std::vector<double> kernel_scores(row, row + valid);
        const int k = static_cast<int>(std::min<int64_t>(64, valid));
        const std::vector<int32_t> selected = ref::select_topk(kernel_scores, valid, k);
        const std::vector<int32_t> reference = ref::select_topk(c.exact[r], valid, k);
        recall_sum += row_metrics(c.exact[r], valid, selected, reference, c.host.page_size).recall;
      }
      ++rows;
    }
  }
  const bool ok = failures.empty();
  stage["pass"] = ok;
  stage["rows"] = rows;
  stage["scores"] = scores;
  stage["contract"] = exact_order ? "exact-order" : "bounded";
  stage["failing_rows"] = nlohmann::json::array();
  for (const LogitsRowFailure& f : failures) {
    stage["failing_rows"].push_back({{"row", f.where}, {"scores", f.scores}, {"worst", f.worst}, {"excess", f.excess}});
  }
  if (!ok) {
    report.text += "paged logits (" + std::string(exact_order ? "exact-order" : "bounded") + " contract): MISMATCH in " +
                   std::to_string(failures.size()) + " of " + std::to_string(rows) + " rows\n";
    for (size_t i = 0; i < std::min<size_t>(4, failures.size()); ++i) {
      report.text += "  " + failures[i].where + ": " + std::to_string(failures[i].scores) + " score(s); " +
                     (exact_order ? "first " : "worst ") + failures[i].worst + "\n";
    }
  } else if (exact_order) {
    report.text += "paged logits: bit-exact (exact-order contract) on " + std::to_string(scores) + " scores in " +
                   std::to_string(rows) + " rows (page sizes 1..256, decode and prefill rows)\n";
  } else {
    const bool derived = logit_bound_derived_for(recipe.key_quant.format, recipe.score);
    char line[384];
    std::snprintf(line, sizeof line,
                  "paged logits (bounded contract): %lld scores in %lld rows %s, largest error %.3g of its bound and "
                  "%.3g of the row's largest |exact score|; top-64 recall vs exact %.4f (mean)\n",
                  static_cast<long long>(scores), static_cast<long long>(rows),
                  derived ? "within the bound (oracle/logits_bound.h)"
                          : "finite (no bound is derived for this cache format and accumulation: errors reported only)",
                  worst_bound_fraction, worst_relative, rows ? recall_sum / rows : 1.0);
    report.text += line;
    stage["bound_derived"] = derived;
  }
  if (!exact_order) {
    stage["worst_error_fraction_of_bound"] = worst_bound_fraction;
    stage["worst_error_relative_to_row_max"] = worst_relative;
    stage["mean_top64_recall"] = rows ? recall_sum / rows : 1.0;
  }
  report.json["stages"].push_back(stage);
  report.pass = report.pass && ok;
  ++report.stages_run;
}

// Top-K rows: Gaussian, few distinct values (ties at the cut), floats sharing their high
// 22 bits, and constant rows. Two batches per K: 16 rows with lengths around K, four at
// kLongTopKRow and the rest drawn up to it; and 32 rows all at kLongTopKRow. kLongTopKRow =
// 131,072 is the 128K context the DSA indexers score in one row, long enough for the
// kernels' long-row paths (several CTAs or a cluster per row), which rows of a few thousand
// never reach. The batch size matters as much: a kernel that gives a cluster to each row
// while the rows fit the GPU's clusters and queues rows on a persistent pool past that
// takes a different path at 32 rows than at 16 (an H200 holds about 30 such clusters).
// Each row judged under the contract (the kernel's, or config.topk_contract).
void verify_topk(const dev::KernelUnderTest& kernel, const dev::KernelCapabilities& caps, const VerifyConfig& config,
                 std::mt19937_64& rng, VerifyReport& report) {
  if (!caps.topk) {
    report.text += "top-K: not provided by the kernel\n";
    return;
  }
  const dev::TopKContract contract = config.topk_contract.value_or(caps.topk_contract);
  const std::vector<int> ks = caps.topk_k > 0 ? std::vector<int>{caps.topk_k} : std::vector<int>{512, 1024, 2048};
  int64_t rows_checked = 0, identical = 0, order_only = 0, tie_rows = 0, tie_keys = 0;
  std::vector<std::string> failures;
  nlohmann::json failing = nlohmann::json::array();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int kLongTopKRow = 131072;
  struct BatchShape {
    int rows;
    bool all_long;
  };
  const int64_t batches = 2 * static_cast<int64_t>(ks.size());
  int64_t batches_done = 0;
  for (const int k : ks) {
    for (const BatchShape shape : {BatchShape{16, false}, BatchShape{32, true}}) {
      if (config.progress) config.progress("top-K", batches_done++, batches);
      dev::HostTopKBatch b;
      b.k = k;
      b.row_stride = std::max(kLongTopKRow, 2 * k);
      const int rows = shape.rows;
      b.scores.assign(static_cast<size_t>(rows) * b.row_stride, 0.0f);
      for (int r = 0; r < rows; ++r) {
        const int64_t len = shape.all_long ? b.row_stride
                            : r < 4        ? k - 1 + r % 3
                            : r < 8        ? b.row_stride
                                           : std::uniform_int_distribution<int64_t>(1, b.row_stride)(rng);
        b.valid_lengths.push_back(static_cast<int32_t>(len));
        float* row = b.scores.data() + static_cast<size_t>(r) * b.row_stride;
        const int kind = r % 4;
        for (int64_t s = 0; s < len; ++s) {
          if (kind == 0) row[s] = normal(rng);
          if (kind == 1) row[s] = static_cast<float>(std::uniform_int_distribution<int>(0, 7)(rng));
          if (kind == 2) {  // one 2^22-aligned block of fp32 bit patterns: only the low 10 bits vary
            const uint32_t u = 0x3F80'0000u | std::uniform_int_distribution<uint32_t>(0, 1023)(rng);
            std::memcpy(&row[s], &u, 4);
          }
          if (kind == 3) row[s] = 1.5f;
        }
      }
      const std::vector<int32_t> got = kernel.topk(b);
      for (int r = 0; r < rows; ++r) {
        const std::vector<float> scores(b.scores.begin() + static_cast<size_t>(r) * b.row_stride,
                                        b.scores.begin() + static_cast<size_t>(r) * b.row_stride + b.valid_lengths[r]);
        const std::vector<int32_t> actual(got.begin() + static_cast<size_t>(r) * k,
                                          got.begin() + static_cast<size_t>(r + 1) * k);
        const TopKRowVerdict v = judge_topk_row(scores, k, actual, contract, caps.topk_padding);
        ++rows_checked;
        identical += v.identical;
        order_only += v.order_only;
        tie_rows += v.tie_swaps > 0;
        tie_keys += v.tie_swaps;
        if (v.pass) continue;
        const std::string where =
            "K " + std::to_string(k) + ", batch of " + std::to_string(rows) + ", row " + std::to_string(r);
        failures.push_back(where + " (" + v.describe() + ")");
        failing.push_back({{"k", k}, {"batch_rows", rows}, {"row", r}, {"length", v.length},
                           {"verdict", v.describe()}, {"order_only", v.order_only}, {"tie_swaps", v.tie_swaps},
                           {"misses", static_cast<int64_t>(v.misses.size())},
                           {"intruders", static_cast<int64_t>(v.intruders.size())},
                           {"misses_in_index_order", v.misses_in_index_order},
                           {"wrong_padding", v.wrong_padding}, {"invalid", v.invalid_count}});
      }
    }
  }
  const bool ok = failures.empty();
  const std::string head = "top-K (" + std::string(to_string(contract)) + " contract): ";
  const std::string summary = std::to_string(identical) + " identical to the reference in order, " +
                              std::to_string(order_only) + " in another order, " + std::to_string(tie_rows) +
                              " with tie substitutions at the cut (" + std::to_string(tie_keys) + " keys)";
  std::string k_text;
  for (int k : ks) k_text += (k_text.empty() ? "" : "/") + std::to_string(k);
  if (ok) {
    report.text += head + "every one of " + std::to_string(rows_checked) + " rows holds (" + summary + "; K " +
                   k_text + "; Gaussian, tie-heavy, shared-22-bit and constant rows)\n";
  } else {
    report.text += head + "MISMATCH on " + std::to_string(failures.size()) + " of " + std::to_string(rows_checked) +
                   " rows (" + summary + ")\n";
    for (size_t i = 0; i < std::min<size_t>(4, failures.size()); ++i) report.text += "  " + failures[i] + "\n";
  }
  report.json["stages"].push_back({{"stage", "top-K"}, {"pass", ok}, {"contract", to_string(contract)},
                                   {"rows", rows_checked}, {"identical", identical}, {"order_only", order_only},
                                   {"rows_with_tie_swaps", tie_rows}, {"tie_swaps", tie_keys},
                                   {"failing_rows", failing}});
  report.pass = report.pass && ok;
  ++report.stages_run;
}

}  // namespace

void verify_scoring(const dev::KernelUnderTest& kernel, const dev::KernelCapabilities& caps,
                    const VerifyConfig& config, std::mt19937_64& rng, VerifyReport& report) {
  verify_paged_logits(kernel, caps, config, rng, report);
  verify_topk(kernel, caps, config, rng, report);
}

}  // namespace dsaf::oracle
