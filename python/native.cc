// File: native.cc — the compiled half of the `dsa_fidelity` Python package (python/dsa_fidelity.py).
//
// A thin nanobind layer over the C++ libraries: every number is computed by reference/ and
// oracle/ exactly as the CLI computes it; this file only moves arrays in and out.
// Contract with dsa_fidelity.py, which checks shapes and dtypes first and raises ValueError /
// TypeError naming the argument:
//   * arrays arrive C-contiguous, little-endian, on the CPU, of the dtype each binding names
//     (float32, int32, int64, uint8); nanobind refuses anything else with a TypeError;
//   * recipes travel as their JSON text (reference/recipe_json.h), verdicts come back as
//     JSON text (the CLI's --json objects) that the Python side wraps;
//   * dsaf::Error becomes ValueError (bad input, usage) or RuntimeError (environment,
//     internal), its message unchanged.
// A key capture (fixtures/cache_capture.h CacheCapture) is the one carrier of a key path's
// inputs, placement and cache: key_cache, compare_cache, detect and write_capture take one.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fixtures/cache_capture.h"
#include "oracle/compare.h"
#include "oracle/detect.h"
#include "oracle/topk_metrics.h"
#include "oracle/topk_verdict.h"
#include "oracle/verdict.h"
#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/recipe_json.h"
#include "reference/rope.h"
#include "reference/score.h"
#include "reference/topk.h"

#if defined(DSAF_HAVE_DEVICE)
#include "device/api.h"
#endif

namespace nb = nanobind;

namespace {

using dsaf::Error;
using dsaf::ErrorKind;
namespace ref = dsaf::ref;
namespace oracle = dsaf::oracle;
namespace fixtures = dsaf::fixtures;

template <class T>
using In = nb::ndarray<const T, nb::c_contig, nb::device::cpu>;
template <class T>
using Out = nb::ndarray<nb::numpy, T>;

template <class T>
std::vector<T> to_vector(const In<T>& a) {
  return std::vector<T>(a.data(), a.data() + a.size());
}

// A numpy array owning `values`, of `shape` (whose product is values.size()).
template <class T>
Out<T> to_numpy(std::vector<T> values, std::vector<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return Out<T>(owned->data(), shape.size(), shape.data(), owner);
}

ref::Recipe recipe_of(const std::string& json_text) {
  ref::Recipe r = ref::recipe_from_json(ref::parse_untrusted_json(json_text, "recipe"));
  r.validate();
  return r;
}

// ---- The key capture --------------------------------------------------------------------
// Field setters copy (the Python objects may change after the call); getters copy out.

struct Capture {
  fixtures::CacheCapture c;
};

// A getter's array owns a copy: not a view into the capture (nanobind's default for
// properties), which could outlive it.
const auto kCopyOut = nb::for_getter(nb::rv_policy::move);

template <class T, std::vector<T> fixtures::CacheCapture::*kField>
void bind_array(nb::class_<Capture>& cls, const char* name, size_t row) {
  cls.def_prop_rw(
      name,
      [row](const Capture& self) {
        const std::vector<T>& v = self.c.*kField;
        return row > 1 ? to_numpy<T>(v, {v.size() / row, row}) : to_numpy<T>(v, {v.size()});
      },
      [](Capture& self, const In<T>& a) { self.c.*kField = to_vector(a); }, kCopyOut);
}

// ---- Functions ----------------------------------------------------------------------------

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const ref::Recipe& r : ref::presets()) names.push_back(r.name);
  return names;
}

std::string preset_json(const std::string& name) { return ref::recipe_to_json(ref::preset(name)).dump(); }

std::string normalize_recipe(const std::string& json_text) { return ref::recipe_to_json(recipe_of(json_text)).dump(); }

std::vector<std::string> recipe_file_jsons(const std::string& path) {
  std::vector<std::string> out;
  for (const ref::Recipe& r : ref::load_recipe_file(path)) out.push_back(ref::recipe_to_json(r).dump());
  return out;
}

// The layout format of a recipe's key cache ("fp8_e4m3fn", "bf16", "fp4_e2m1", "fp32"):
// fp4_simulated_bf16 keys are stored as bf16; "none" for a recipe that stores no cache
// (the fp64 oracles).
std::string cache_format_of(const std::string& recipe_json) {
  const ref::StorageFormat f = recipe_of(recipe_json).key_quant.format;
  if (f == ref::StorageFormat::kNone) return "none";
  return fixtures::cache_format_name(f == ref::StorageFormat::kFp4SimulatedBf16 ? ref::StorageFormat::kBf16 : f);
}

int page_bytes(const std::string& format, int page_size) {
  return static_cast<int>(ref::PagedCacheLayout(fixtures::parse_cache_format(format), page_size).page_bytes());
}

// The recipe's own RoPE table for positions [0, rows): cos and sin, [rows][32] each.
std::tuple<Out<float>, Out<float>> rope_table(const std::string& recipe_json, int64_t rows) {
  if (rows < 1) throw Error(ErrorKind::kBadInput, "rope: no positions");
  if (rows > std::numeric_limits<int>::max()) {
    throw Error(ErrorKind::kBadInput, "rope: a table of " + std::to_string(rows) + " rows: positions are int32");
  }
  const ref::RopeTable table(recipe_of(recipe_json).rope.table, static_cast<int>(rows));
  const size_t n = static_cast<size_t>(rows) * ref::kRopePairs;
  return {to_numpy<float>(std::vector<float>(table.cos(0), table.cos(0) + n), {static_cast<size_t>(rows), 32}),
          to_numpy<float>(std::vector<float>(table.sin(0), table.sin(0) + n), {static_cast<size_t>(rows), 32})};
}

// Two caches of one layout, byte for byte (oracle/verdict.h compare_paged_cache), the
// first difference located by page, slot, field and element; no token owns a slot here,
// so the verdict's counts are of all differing bytes.
std::string compare_cache_bytes(const In<uint8_t>& expected, const In<uint8_t>& actual, const std::string& format,
                                int page_size) {
  const ref::PagedCacheLayout layout(fixtures::parse_cache_format(format), page_size);
  const oracle::ByteVerdict v = oracle::compare_paged_cache(layout, {}, to_vector(expected), to_vector(actual));
  nlohmann::json j = {{"pass", v.pass},
                      {"bytes_compared", v.bytes},
                      {"mismatched_bytes", v.untouched_region_writes + v.mismatches},
                      {"text", v.describe()}};
  const std::optional<oracle::ByteMismatch>& first = v.first ? v.first : v.first_untouched;
  if (first) {
    const oracle::ByteMismatch& m = *first;
    j["first_mismatch"] = {{"token", -1},           {"sequence", m.sequence},
                           {"position", m.position}, {"page", m.page},
                           {"slot", m.slot},         {"field", oracle::to_string(m.field)},
                           {"element", m.element},   {"byte_offset", m.byte_offset},
                           {"expected_code", m.expected_code}, {"actual_code", m.actual_code},
                           {"expected_value", m.expected_value}, {"actual_value", m.actual_value}};
  }
  return j.dump();
}

// The capture as the oracle's observation (a capture moved in is left empty: the Python
// side makes one for each call): the placement resolved (CacheCapture::placement_slots),
// every other rule checked by oracle::expected_cache / compare_capture. An empty RoPE table
// stays empty: each recipe's own, computed for the tokens' positions only. (A capture
// *file* needs its table: fixtures::observation_of checks every rule of the file format.)
oracle::KeyObservation take_observation(fixtures::CacheCapture c) {
  oracle::KeyObservation obs;
  obs.slots = c.placement_slots();
  obs.page_size = c.page_size;
  obs.layout = c.format;
  obs.num_pages = c.num_pages();
  obs.key_inputs = std::move(c.k);
  obs.norm_weight = std::move(c.norm_weight);
  obs.norm_bias = std::move(c.norm_bias);
  obs.positions = std::move(c.positions);
  obs.sequences = std::move(c.seq);
  obs.rope_cos = std::move(c.rope_cos);
  obs.rope_sin = std::move(c.rope_sin);
  obs.cache = std::move(c.cache);
  return obs;
}

// The bytes the reference writes for the capture's tokens into a cache of the capture's
// size: its own bytes (zeros from the Python side) wherever no token is written. Consumes
// the capture.
Out<uint8_t> key_cache(Capture& capture, const std::string& recipe_json) {
  const ref::Recipe recipe = recipe_of(recipe_json);
  const oracle::KeyObservation obs = take_observation(std::move(capture.c));
  std::vector<uint8_t> bytes = oracle::expected_cache(recipe, obs);
  const ref::PagedCacheLayout layout(obs.layout, obs.page_size);
  return to_numpy<uint8_t>(std::move(bytes), {static_cast<size_t>(obs.num_pages),
                                              static_cast<size_t>(layout.page_bytes())});
}

// Seconds of the fastest of `repeats` runs of expected_cache alone on (a copy of) the
// capture: the C++ reference without this layer, for the overhead benchmark.
double reference_seconds(const Capture& capture, const std::string& recipe_json, int repeats) {
  const ref::Recipe recipe = recipe_of(recipe_json);
  const oracle::KeyObservation obs = take_observation(capture.c);
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<uint8_t> bytes = oracle::expected_cache(recipe, obs);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (bytes.empty()) return -1.0;  // keeps the call from being optimised away
  }
  return best;
}

// The CLI's `compare --json` verdict, and on a mismatch the single recipe fields whose
// change reproduces the bytes.
std::string compare_cache(const Capture& capture, const std::string& recipe_json) {
  const ref::Recipe recipe = recipe_of(recipe_json);
  const oracle::KeyObservation obs = take_observation(capture.c);
  const oracle::CaptureVerdict verdict = oracle::compare_capture(obs, recipe);
  nlohmann::json j = oracle::to_json(verdict);
  j["explaining"] = nlohmann::json::array();
  if (!verdict.pass) j["explaining"] = oracle::to_json(oracle::detect_capture(obs, {recipe}))["explaining"];
  return j.dump();
}

std::string detect(const Capture& capture, const std::vector<std::string>& recipe_jsons) {
  std::vector<ref::Recipe> candidates;
  for (const std::string& text : recipe_jsons) candidates.push_back(recipe_of(text));
  return oracle::to_json(oracle::detect_capture(take_observation(capture.c), candidates)).dump();
}

void write_capture(const Capture& capture, const std::string& path) { fixtures::write_cache_capture(capture.c, path); }

Capture read_capture(const std::string& path) { return Capture{fixtures::read_cache_capture(path)}; }

// The query path of T tokens of H heads: the stored bytes of every head and the folded
// head weights. rope_cos/rope_sin: [R][32], or empty for the recipe's own table.
std::tuple<Out<uint8_t>, Out<uint8_t>, Out<float>> query(const std::string& recipe_json, const In<float>& q,
                                                         const In<float>& wproj, const In<int32_t>& positions,
                                                         const In<float>& rope_cos, const In<float>& rope_sin) {
  const ref::Recipe recipe = recipe_of(recipe_json);
  const size_t tokens = positions.size();
  if (tokens == 0 || wproj.size() % tokens != 0) throw Error(ErrorKind::kBadInput, "wproj: not [T][H]");
  const int heads = static_cast<int>(wproj.size() / tokens);
  if (q.size() != tokens * heads * ref::kHeadDim) throw Error(ErrorKind::kBadInput, "q: not [T][H][128]");
  int32_t max_position = 0;
  for (size_t t = 0; t < tokens; ++t) {
    if (positions.data()[t] < 0) throw Error(ErrorKind::kBadInput, "positions: a negative position");
    max_position = std::max(max_position, positions.data()[t]);
  }
  const ref::RopeTable rope = rope_cos.size() == 0 ? ref::RopeTable(recipe.rope.table, to_vector(positions))
                                                   : ref::RopeTable(to_vector(rope_cos), to_vector(rope_sin));
  if (static_cast<int64_t>(rope_cos.size()) != 0 &&
      static_cast<int64_t>(rope_cos.size()) < (int64_t{max_position} + 1) * ref::kRopePairs) {
    throw Error(ErrorKind::kBadInput, "rope: the table has no row for position " + std::to_string(max_position));
  }
  std::vector<uint8_t> values, scales;
  std::vector<float> weights;
  size_t value_bytes = 0, scale_bytes = 0;
  for (size_t t = 0; t < tokens; ++t) {
    const ref::QueryOutput out = ref::run_query_path(recipe, q.data() + t * heads * ref::kHeadDim, heads,
                                                     wproj.data() + t * heads, positions.data()[t], rope);
    for (int h = 0; h < heads; ++h) {
      value_bytes = out.heads[h].value_bytes.size(), scale_bytes = out.heads[h].scale_bytes.size();
      values.insert(values.end(), out.heads[h].value_bytes.begin(), out.heads[h].value_bytes.end());
      scales.insert(scales.end(), out.heads[h].scale_bytes.begin(), out.heads[h].scale_bytes.end());
      weights.push_back(static_cast<float>(out.weights[h]));
    }
  }
  const size_t h = static_cast<size_t>(heads);
  return {to_numpy<uint8_t>(std::move(values), {tokens, h, value_bytes}),
          to_numpy<uint8_t>(std::move(scales), {tokens, h, scale_bytes}),
          to_numpy<float>(std::move(weights), {tokens, h})};
}

// Scores I[t, n] of query tokens (stored heads and weights, as `query` returns them)
// against the keys at `key_slots` of a cache of `format` and `page_size`, under the
// recipe's score accumulation (reference/score.h): fp32 values (or fp64 for kExact).
Out<double> index_scores(const std::string& recipe_json, const In<uint8_t>& q_values, const In<uint8_t>& q_scales,
                         const In<float>& weights, const In<uint8_t>& cache, const In<int64_t>& key_slots,
                         int page_size) {
  const ref::Recipe recipe = recipe_of(recipe_json);
  const ref::StorageFormat q_format = recipe.query_quant.format;
  const ref::StorageFormat k_format =
      recipe.key_quant.format == ref::StorageFormat::kFp4SimulatedBf16 ? ref::StorageFormat::kBf16 : recipe.key_quant.format;
  const ref::PagedCacheLayout layout(k_format, page_size);
  if (cache.size() % layout.page_bytes() != 0) throw Error(ErrorKind::kBadInput, "cache: not a whole number of pages");
  const int64_t pages = static_cast<int64_t>(cache.size()) / layout.page_bytes();
  const size_t rows = weights.ndim() == 2 ? weights.shape(0) : 0;
  const size_t heads = weights.ndim() == 2 ? weights.shape(1) : 0;
  if (rows == 0 || heads == 0) throw Error(ErrorKind::kBadInput, "weights: not [T][H]");
  // Each head's bytes as the recipe's query format stores them: load_head reads that many.
  const size_t vb = static_cast<size_t>(ref::value_bytes_per_head(q_format));
  const size_t sb = static_cast<size_t>(ref::scale_bytes_per_head(q_format));
  if (q_values.size() != rows * heads * vb || q_scales.size() != rows * heads * sb) {
    throw Error(ErrorKind::kBadInput,
                fmt::format("q.values / q.scales: {} and {} bytes, not [T={}][H={}][{}] and [{}][{}][{}] (the "
                            "recipe's query heads)",
                            q_values.size(), q_scales.size(), rows, heads, vb, rows, heads, sb));
  }
  const std::vector<uint8_t> cache_bytes = to_vector(cache);
  ref::KeyMatrix keys;
  for (size_t n = 0; n < key_slots.size(); ++n) {
    const int64_t slot = key_slots.data()[n];
    if (slot < 0 || slot >= pages * page_size) {
      throw Error(ErrorKind::kBadInput, "key_slots[" + std::to_string(n) + "] = " + std::to_string(slot) +
                                            " is outside the cache's " + std::to_string(pages * page_size) + " slots");
    }
    keys.append(layout.load(cache_bytes, {slot / page_size, static_cast<int>(slot % page_size)}));
  }
  std::vector<double> scores;
  scores.reserve(rows * key_slots.size());
  for (size_t t = 0; t < rows; ++t) {
    std::vector<ref::StoredHead> stored;
    std::vector<double> w;
    for (size_t h = 0; h < heads; ++h) {
      const size_t i = t * heads + h;
      stored.push_back(ref::load_head(q_format, q_values.data() + i * vb, q_scales.data() + i * sb));
      w.push_back(weights.data()[i]);
    }
    const std::vector<double> row =
        ref::index_scores(ref::prepare_query(stored, w), keys, keys.num_keys, recipe.score);
    scores.insert(scores.end(), row.begin(), row.end());
  }
  return to_numpy<double>(std::move(scores), {rows, key_slots.size()});
}

// Valid lengths [R] of rows of n keys: each in [0, n] (the keys a row's functions read).
void check_valid_lengths(const In<int64_t>& valid, size_t n) {
  for (size_t r = 0; r < valid.size(); ++r) {
    const int64_t v = valid.data()[r];
    if (v < 0 || static_cast<uint64_t>(v) > n) {
      throw Error(ErrorKind::kBadInput, fmt::format("valid_lengths[{}] = {} is outside 0..{}", r, v, n));
    }
  }
}

// Rows of scores [R][N] with valid lengths [R] (each <= N): the reference's top-K of each
// (reference/topk.h: higher first, ties to the lower index, -1 past the valid ones).
Out<int32_t> topk(const In<double>& scores, const In<int64_t>& valid, int k) {
  if (scores.ndim() != 2 || valid.size() != scores.shape(0)) throw Error(ErrorKind::kBadInput, "scores: not [R][N]");
  if (k < 1) throw Error(ErrorKind::kBadInput, "k must be >= 1");
  const size_t rows = scores.shape(0), n = scores.shape(1);
  check_valid_lengths(valid, n);
  std::vector<int32_t> out;
  out.reserve(rows * k);
  for (size_t r = 0; r < rows; ++r) {
    const std::vector<double> row(scores.data() + r * n, scores.data() + (r + 1) * n);
    const std::vector<int32_t> sel = ref::select_topk(row, valid.data()[r], k);
    out.insert(out.end(), sel.begin(), sel.end());
  }
  return to_numpy<int32_t>(std::move(out), {rows, static_cast<size_t>(k)});
}

nlohmann::json keys_json(const std::vector<oracle::TopKKey>& keys) {
  nlohmann::json out = nlohmann::json::array();
  for (const oracle::TopKKey& key : keys) {
    out.push_back({{"index", key.index}, {"score", key.score}, {"rank", key.rank}, {"gap", key.gap}});
  }
  return out;
}

// Every row of a kernel's top-K [R][k] judged against the scores it selected from
// (oracle/topk_verdict.h), as a JSON list of row verdicts.
std::string compare_topk(const In<int32_t>& actual, const In<float>& scores, const In<int64_t>& valid, int k,
                         const std::string& contract, const std::string& padding) {
  if (scores.ndim() != 2 || valid.size() != scores.shape(0)) throw Error(ErrorKind::kBadInput, "scores: not [R][N]");
  const size_t rows = scores.shape(0), n = scores.shape(1);
  check_valid_lengths(valid, n);
  if (k < 1 || actual.size() != rows * static_cast<size_t>(k)) throw Error(ErrorKind::kBadInput, "actual: not [R][k]");
  const oracle::TopKContractKind kind = oracle::parse_topk_contract(contract);
  if (padding != "minus_one" && padding != "unread") {
    throw Error(ErrorKind::kBadInput, "padding: '" + padding + "' is not minus_one or unread");
  }
  const auto pad = padding == "minus_one" ? oracle::TopKPaddingKind::kMinusOne : oracle::TopKPaddingKind::kUnread;
  nlohmann::json out = nlohmann::json::array();
  for (size_t r = 0; r < rows; ++r) {
    const std::vector<float> row(scores.data() + r * n, scores.data() + r * n + valid.data()[r]);
    const std::vector<int32_t> got(actual.data() + r * k, actual.data() + (r + 1) * k);
    const oracle::TopKRowVerdict v = oracle::judge_topk_row(row, k, got, kind, pad);
    out.push_back({{"row", r},
                   {"pass", v.pass},
                   {"identical", v.identical},
                   {"order_only", v.order_only},
                   {"tie_swaps", v.tie_swaps},
                   {"invalid", v.invalid_count},
                   {"wrong_padding", v.wrong_padding},
                   {"misses", keys_json(v.misses)},
                   {"intruders", keys_json(v.intruders)},
                   {"text", v.describe()}});
  }
  return out.dump();
}

// Top-K metrics of selections [R][k] against exact scores [R][N] (oracle/topk_metrics.h),
// the reference set being the exact scores' own top-K: per metric its mean, p1, p50 and
// worst over the rows.
std::string topk_metrics(const In<int32_t>& selected, const In<double>& exact, const In<int64_t>& valid, int k,
                         int page_size) {
  if (exact.ndim() != 2 || valid.size() != exact.shape(0)) throw Error(ErrorKind::kBadInput, "exact_scores: not [R][N]");
  const size_t rows = exact.shape(0), n = exact.shape(1);
  check_valid_lengths(valid, n);
  if (k < 1 || selected.size() != rows * static_cast<size_t>(k)) {
    throw Error(ErrorKind::kBadInput, "selected: not [R][k]");
  }
  std::vector<oracle::RowMetrics> metrics;
  for (size_t r = 0; r < rows; ++r) {
    const std::vector<double> row(exact.data() + r * n, exact.data() + (r + 1) * n);
    const std::vector<int32_t> reference = ref::select_topk(row, valid.data()[r], k);
    const std::vector<int32_t> sel(selected.data() + r * k, selected.data() + (r + 1) * k);
    metrics.push_back(oracle::row_metrics(row, valid.data()[r], sel, reference, page_size));
  }
  const oracle::Aggregate a = oracle::aggregate(metrics);
  nlohmann::json out = {{"rows", rows}, {"k", k}, {"threshold_valid_fraction", a.threshold_valid_fraction}};
  const auto add = [&out](const char* name, const oracle::Summary& s) {
    out[name] = {{"mean", s.mean}, {"p1", s.p1}, {"p50", s.p50}, {"worst", s.worst}};
  };
  add("recall", a.recall);
  add("jaccard", a.jaccard);
  add("tie_aware_recall", a.tie_aware_recall);
  add("value_recall", a.value_recall);
  add("mass_recall", a.mass_recall);
  add("kendall_tau", a.kendall_tau);
  add("page_recall", a.page_recall);
  int64_t changed = 0;
  for (const oracle::RowMetrics& m : metrics) changed += m.changed;
  out["changed"] = changed;
  return out.dump();
}

#if defined(DSAF_HAVE_DEVICE)
// Our built-in key kernel (device/api.h "builtin") on a page-table capture: the cache it
// writes, starting from the capture's cache bytes.
Out<uint8_t> builtin_key_cache(const Capture& capture, const std::string& recipe_json) {
  const fixtures::CacheCapture& c = capture.c;
  c.token_slots();  // validates
  if (c.seq.empty()) throw Error(ErrorKind::kBadInput, "the built-in kernel takes page tables (seq and page_table)");
  dsaf::dev::HostKeyBatch b;
  b.bf16 = c.k_dtype == fixtures::TensorDtype::kBf16;
  if (b.bf16) {
    for (float v : c.k) b.input_bf16.push_back(ref::encode_bf16(v));
  } else {
    b.input_f32 = c.k;
  }
  b.positions = c.positions;
  b.seq = c.seq;
  b.page_tables = c.page_tables;
  b.page_table_stride = c.page_table_stride;
  b.page_size = c.page_size;
  b.rope_cos = c.rope_cos;
  b.rope_sin = c.rope_sin;
  b.norm_weight = c.norm_weight;
  b.norm_bias = c.norm_bias;
  b.cache = c.cache;
  b.recipe = recipe_of(recipe_json);
  std::vector<uint8_t> bytes = dsaf::dev::open_kernel("builtin")->key_store(b);
  const ref::PagedCacheLayout layout(c.format, c.page_size);
  return to_numpy<uint8_t>(std::move(bytes), {static_cast<size_t>(c.num_pages()),
                                              static_cast<size_t>(layout.page_bytes())});
}
#endif

}  // namespace

NB_MODULE(_dsa_fidelity, m) {
  m.doc() = "dsa-fidelity's C++ reference and oracle (use the dsa_fidelity module, not this one)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      const bool user = e.kind() == ErrorKind::kBadInput || e.kind() == ErrorKind::kUsage;
      PyErr_SetString(user ? PyExc_ValueError : PyExc_RuntimeError, e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "dsa_fidelity: out of memory");
    }
  });

  auto cls = nb::class_<Capture>(m, "Capture", "A key capture: inputs, placement and cache (fixtures/SCHEMA.md §10)");
  cls.def(nb::init<>());
  using C = fixtures::CacheCapture;
  bind_array<float, &C::k>(cls, "k", ref::kHeadDim);
  bind_array<float, &C::norm_weight>(cls, "norm_weight", 1);
  bind_array<float, &C::norm_bias>(cls, "norm_bias", 1);
  bind_array<int32_t, &C::positions>(cls, "positions", 1);
  bind_array<int64_t, &C::slots>(cls, "slots", 1);
  bind_array<int32_t, &C::seq>(cls, "seq", 1);
  bind_array<float, &C::rope_cos>(cls, "rope_cos", ref::kRopePairs);
  bind_array<float, &C::rope_sin>(cls, "rope_sin", ref::kRopePairs);
  bind_array<uint8_t, &C::cache>(cls, "cache", 1);
  cls.def_prop_rw(
      "page_tables",
      [](const Capture& s) {
        const size_t stride = static_cast<size_t>(std::max<int64_t>(s.c.page_table_stride, 1));
        return to_numpy<int32_t>(s.c.page_tables, {s.c.page_tables.size() / stride, stride});
      },
      [](Capture& s, const In<int32_t>& a) {
        if (a.ndim() != 2) throw Error(ErrorKind::kBadInput, "page_table: not [S][P]");
        s.c.page_tables = to_vector(a);
        s.c.page_table_stride = static_cast<int64_t>(a.shape(1));
      },
      kCopyOut);
  cls.def_prop_rw(
      "k_is_bf16", [](const Capture& s) { return s.c.k_dtype == fixtures::TensorDtype::kBf16; },
      [](Capture& s, bool bf16) { s.c.k_dtype = bf16 ? fixtures::TensorDtype::kBf16 : fixtures::TensorDtype::kF32; });
  cls.def_prop_rw(
      "format", [](const Capture& s) { return fixtures::cache_format_name(s.c.format); },
      [](Capture& s, const std::string& name) { s.c.format = fixtures::parse_cache_format(name); });
  cls.def_prop_rw(
      "page_size", [](const Capture& s) { return s.c.page_size; }, [](Capture& s, int p) { s.c.page_size = p; });
  cls.def_prop_ro("num_pages", [](const Capture& s) { return s.c.num_pages(); });
  cls.def("token_slots", [](const Capture& s) { return to_numpy<int64_t>(s.c.token_slots(), {s.c.positions.size()}); });
  const auto text = [&cls](const char* name, std::string C::*field) {
    cls.def_prop_rw(
        name, [field](const Capture& s) { return s.c.*field; },
        [field](Capture& s, const std::string& v) { s.c.*field = v; });
  };
  text("engine", &C::engine);
  text("kernel", &C::kernel);
  text("version", &C::version);
  text("recipe", &C::recipe);
  text("generator", &C::generator);
  text("synthetic_label", &C::synthetic_label);
  text("notes", &C::notes);
  cls.def_prop_rw(
      "synthetic", [](const Capture& s) { return s.c.synthetic; }, [](Capture& s, bool v) { s.c.synthetic = v; });

  m.def("preset_names", &preset_names);
  m.def("preset_json", &preset_json);
  m.def("normalize_recipe", &normalize_recipe);
  m.def("recipe_file_jsons", &recipe_file_jsons);
  m.def("cache_format_of", &cache_format_of);
  m.def("page_bytes", &page_bytes);
  m.def("rope_table", &rope_table);
  m.def("compare_cache_bytes", &compare_cache_bytes);
  m.def("key_cache", &key_cache);
  m.def("reference_seconds", &reference_seconds);
  m.def("compare_cache", &compare_cache);
  m.def("detect", &detect);
  m.def("write_capture", &write_capture);
  m.def("read_capture", &read_capture);
  m.def("query", &query);
  m.def("index_scores", &index_scores);
  m.def("topk", &topk);
  m.def("compare_topk", &compare_topk);
  m.def("topk_metrics", &topk_metrics);
#if defined(DSAF_HAVE_DEVICE)
  m.def("builtin_key_cache", &builtin_key_cache);
  m.attr("has_device") = true;
#else
  m.attr("has_device") = false;
#endif
}
