// File: study_device.cc — the studies' device mode (study_device.h).
#include "oracle/study_device.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "oracle/logits_bound.h"
#include "oracle/parallel.h"
#include "oracle/topk_verdict.h"
#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/paged_cache.h"
#include "reference/quantize.h"
#include "reference/recipe_fields.h"
#include "reference/topk.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;

[[noreturn]] void mismatch(const std::string& where, const std::string& what) {
  throw Error(ErrorKind::kMismatch, where + ": " + what);
}

template <class E>
std::string enum_text(E value) {
  for (const auto& e : ref::enum_names(E{})) {
    if (e.value == value) return e.name;
  }
  return std::to_string(static_cast<int>(value));
}

uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

std::string hex(const std::vector<uint8_t>& bytes, size_t from, size_t count) {
  std::string out;
  for (size_t i = from; i < std::min(bytes.size(), from + count); ++i) out += fmt::format("{:02x}", bytes[i]);
  return out;
}

// The first differing byte of two byte strings of equal length, or -1.
int64_t first_difference(const uint8_t* a, const uint8_t* b, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

// Whether `kernel` may run the key store of `recipe` for contexts up to `longest`.
bool stores_keys(const dev::KernelUnderTest* kernel, const ref::Recipe& recipe, int64_t longest, int page_size) {
  if (kernel == nullptr) return false;
  const dev::KernelCapabilities c = kernel->capabilities();
  return c.key_store && c.stores(recipe.key_quant.format) && c.takes_page_size(page_size) &&
         (c.max_position == 0 || longest - 1 <= c.max_position) && (c.bf16_input || c.fp32_input);
}

bool runs_logits(const dev::KernelUnderTest* kernel, const ref::Recipe& recipe) {
  if (kernel == nullptr) return false;
  const dev::KernelCapabilities c = kernel->capabilities();
  // A bounded kernel runs the formats its bound is derived for (logits_bound.h).
  return c.paged_logits && (c.logits_exact_order || logit_bound_derived_for(recipe.key_quant.format, recipe.score));
}

bool runs_topk(const dev::KernelUnderTest* kernel, int topk) {
  if (kernel == nullptr) return false;
  const dev::KernelCapabilities c = kernel->capabilities();
  return c.topk && (c.topk_k == 0 || c.topk_k == topk);
}

// The source through the rounding of InputRounding.
class RoundedSource : public ActivationSource {
 public:
  RoundedSource(std::shared_ptr<const ActivationSource> base, InputRounding rounding)
      : base_(std::move(base)), rounding_(rounding) {
    const auto round = [](const float* in, std::vector<float>& out) {
      if (in == nullptr) return;
      out.assign(in, in + kHeadDim);
      for (float& v : out) v = ref::round_bf16(v);
    };
    if (rounding_.norm_params) {
      round(base_->norm_weight(), norm_weight_);
      round(base_->norm_bias(), norm_bias_);
    }
  }
  int num_heads() const override { return base_->num_heads(); }
  int64_t tokens() const override { return base_->tokens(); }
  void key_input(int64_t token, float* out) const override {
    base_->key_input(token, out);
    round_key_input(rounding_, out);
  }
  void query_input(int64_t token, float* q, float* wproj) const override {
    base_->query_input(token, q, wproj);
    if (rounding_.query_input) {
      for (int i = 0; i < num_heads() * kHeadDim; ++i) q[i] = ref::round_bf16(q[i]);
    }
    if (rounding_.head_weights) {
      for (int h = 0; h < num_heads(); ++h) wproj[h] = ref::round_bf16(wproj[h]);
    }
  }
  const float* norm_weight() const override {
    return rounding_.norm_params && !norm_weight_.empty() ? norm_weight_.data() : base_->norm_weight();
  }
  const float* norm_bias() const override {
    return rounding_.norm_params && !norm_bias_.empty() ? norm_bias_.data() : base_->norm_bias();
  }
  nlohmann::json describe() const override {
    nlohmann::json j = base_->describe();
    nlohmann::json rounded = nlohmann::json::array();
    if (rounding_.key_input) rounded.push_back("key inputs");
    if (rounding_.norm_params) rounded.push_back("key norm parameters");
    if (rounding_.query_input) rounded.push_back("query inputs");
    if (rounding_.head_weights) rounded.push_back("head weights");
    j["rounded_to_bf16"] = rounded;
    return j;
  }

 private:
  std::shared_ptr<const ActivationSource> base_;
  InputRounding rounding_;
  std::vector<float> norm_weight_, norm_bias_;
};

// Times one call of a stage and adds its traffic. The study's kernels time each call
// warm (KernelUnderTest::set_warm_timing, cli/study_device_options.cc): the first call of
// a stage pays the module's lazy load, and each call's upload leaves the device idle long
// enough for its clocks to fall, which a device serving without pause does not pay.
template <class Call>
auto timed(StudyTimings* timings, const char* stage, const dev::KernelUnderTest& kernel, double bytes, Call call,
           double flops = 0.0, ComputeUnit unit = ComputeUnit::kNone) {
  if (timings == nullptr) return call();
  StageTiming& t = timings->stages[std::string(stage) + " [" + kernel.name() + "]"];
  auto out = call();
  t.kernel = kernel.name();
  ++t.calls;
  t.device_ms += kernel.last_device_ms();
  t.host_ms += kernel.last_host_ms();
  t.bytes += bytes;
  if (unit != ComputeUnit::kNone) t.flops[unit] += flops;
  return out;
}

// The RoPE table's bytes a key or query call must read per distinct position among its
// tokens: the position's cos and sin rows, 32 fp32 each. The table is an input of the call
// (KeyStoreArgs::rope_cos/rope_sin), arbitrary bytes a kernel cannot recompute, and tokens
// that share a position may share its rows, so a batch of distinct positions (one
// sequence) reads one row pair a token and a batched prefill whose sequences repeat
// positions reads each pair once. The distinct count is the tokens less
// dev::repeated_positions_of (the study's positions are never negative).
constexpr double kRopeRowPairBytes = 2 * 32 * sizeof(float);

}  // namespace

// ---- which kernel runs what --------------------------------------------------------------

StageKernels stage_kernels(const StudyDevice& device, const ref::Recipe& recipe, int topk, int64_t longest,
                           int page_size) {
  const auto pick = [&](const char* stage, bool kernel_runs, bool fallback_runs) {
    if (kernel_runs) return device.kernel;
    if (fallback_runs) return device.fallback;
    throw Error(ErrorKind::kUsage,
                fmt::format("--device gpu: neither {} nor our kernels run the {} of recipe {} (key format {}, "
                            "score accumulation {}, K {}, page size {}, contexts to {})",
                            device.kernel ? device.kernel->name() : "(none)", stage, recipe.name,
                            enum_text(recipe.key_quant.format), enum_text(recipe.score), topk, page_size,
                            longest));
  };
  if (recipe.score != ref::ScoreAccum::kFp32 && recipe.score != ref::ScoreAccum::kBf16) {
    pick("paged logits", false, false);
  }
  StageKernels k;
  k.keys = pick("key store", stores_keys(device.kernel, recipe, longest, page_size),
                stores_keys(device.fallback, recipe, longest, page_size));
  const auto has_query = [](const dev::KernelUnderTest* kernel) {
    return kernel != nullptr && kernel->capabilities().query_path;
  };
  k.queries = pick("query path", has_query(device.kernel), has_query(device.fallback));
  k.logits = pick("paged logits", runs_logits(device.kernel, recipe), runs_logits(device.fallback, recipe));
  k.topk = pick("top-K", runs_topk(device.kernel, topk), runs_topk(device.fallback, topk));
  const dev::KernelCapabilities keys = k.keys->capabilities();
  k.key_max_tokens = keys.max_tokens;
  k.key_input_fp32 = keys.fp32_input;
  k.logits_exact_order = k.logits->capabilities().logits_exact_order;
  const dev::KernelCapabilities top = k.topk->capabilities();
  k.topk_contract = top.topk_contract;
  k.topk_padding = top.topk_padding;
  return k;
}

nlohmann::json describe_device(const StudyDevice& device, const std::vector<ref::Recipe>& recipes, int topk,
                               int64_t longest, int page_size) {
  nlohmann::json stages = nlohmann::json::object();
  for (const ref::Recipe& r : recipes) {
    const StageKernels k = stage_kernels(device, r, topk, longest, page_size);
    stages[r.name] = {{"keys", k.keys->name()},
                      {"queries", k.queries->name()},
                      {"logits", k.logits->name()},
                      {"logits_contract", k.logits_exact_order ? "exact-order" : "bounded"},
                      {"topk", k.topk->name()},
                      {"topk_contract", to_string(k.topk_contract)}};
  }
  return {{"mode", "gpu"},
          {"kernel", device.kernel ? device.kernel->name() : ""},
          {"stages", stages},
          {"checked_per_unit_and_recipe",
           {{"rows_or_cases", device.check_rows}, {"cache_slots", device.check_keys}}}};
}

InputRounding input_rounding(const StudyDevice& device, const std::vector<ref::Recipe>& recipes, int topk,
                             int64_t longest, int page_size) {
  InputRounding r;
  r.query_input = true;  // the query ABI takes bf16 input
  for (const ref::Recipe& recipe : recipes) {
    const StageKernels k = stage_kernels(device, recipe, topk, longest, page_size);
    const dev::KernelCapabilities keys = k.keys->capabilities();
    const dev::KernelCapabilities queries = k.queries->capabilities();
    r.key_input = r.key_input || !keys.fp32_input;
    r.norm_params = r.norm_params || keys.norm_params_bf16;
    r.head_weights = r.head_weights || queries.norm_params_bf16;
  }
  return r;
}

std::shared_ptr<const ActivationSource> rounded_inputs(std::shared_ptr<const ActivationSource> source,
                                                       const InputRounding& rounding) {
  if (!rounding.any()) return source;
  return std::make_shared<const RoundedSource>(std::move(source), rounding);
}

void round_key_input(const InputRounding& rounding, float* k_in) {
  if (!rounding.key_input) return;
  for (int i = 0; i < kHeadDim; ++i) k_in[i] = ref::round_bf16(k_in[i]);
}

// ---- timings -------------------------------------------------------------------------------

double Roofline::peak_tflops(ComputeUnit unit) const {
  switch (unit) {
    case ComputeUnit::kTensorFp8: return tensor_fp8_tflops;
    case ComputeUnit::kTensorBf16: return tensor_bf16_tflops;
    case ComputeUnit::kFp32Fma: return fp32_tflops;
    case ComputeUnit::kNone: break;
  }
  return 0.0;
}

nlohmann::json StudyTimings::to_json(const Roofline& roofline) const {
  nlohmann::json out = nlohmann::json::object();
  std::string dominant;
  double most = -1.0;
  for (const auto& [stage, t] : stages) {
    const double gbps = t.device_ms > 0 ? t.bytes / (t.device_ms * 1e6) : 0.0;
    // The arithmetic's floor: each unit's flops at its peak (a unit of unknown peak adds none).
    double flops = 0.0, compute_ms = 0.0;
    for (const auto& [unit, f] : t.flops) {
      flops += f;
      if (roofline.peak_tflops(unit) > 0) compute_ms += f / (roofline.peak_tflops(unit) * 1e9);
    }
    const double memory_ms = roofline.copy_gbps > 0 ? t.bytes / (roofline.copy_gbps * 1e6) : 0.0;
    const double floor_ms = std::max(memory_ms, compute_ms);
    nlohmann::json& s = out[stage];
    s = {{"kernel", t.kernel},
         {"calls", t.calls},
         {"device_ms", t.device_ms},
         {"host_ms", t.host_ms},
         {"bytes", t.bytes},
         {"gb_per_s", gbps},
         {"fraction_of_copy", roofline.copy_gbps > 0 ? gbps / roofline.copy_gbps : 0.0},
         {"flops", flops},
         {"tflops", t.device_ms > 0 ? flops / (t.device_ms * 1e9) : 0.0},
         {"compute_floor_ms", compute_ms},
         {"memory_floor_ms", memory_ms},
         {"floor_ms", floor_ms},
         {"bound", compute_ms > memory_ms ? "compute" : "memory"},
         {"fraction_of_roofline", t.device_ms > 0 ? floor_ms / t.device_ms : 0.0}};
    if (t.device_ms > most) most = t.device_ms, dominant = stage;
  }
  return {{"stages", out},
          {"copy_gb_per_s", roofline.copy_gbps},
          {"peak_tflops", {{"tensor_fp8", roofline.tensor_fp8_tflops},
                           {"tensor_bf16", roofline.tensor_bf16_tflops},
                           {"fp32_fma", roofline.fp32_tflops}}},
          {"dominant", dominant}};
}

std::string StudyTimings::text(const Roofline& roofline) const {
  const nlohmann::json j = to_json(roofline);
  std::string out = fmt::format(
      "device time per stage (copy bandwidth {:.0f} GB/s; dense peaks fp8 / bf16 tensor {:.0f} / {:.0f} TFLOP/s, "
      "fp32 FMA {:.0f}):\n",
      roofline.copy_gbps, roofline.tensor_fp8_tflops, roofline.tensor_bf16_tflops, roofline.fp32_tflops);
  for (const auto& [stage, t] : j.at("stages").items()) {
    const bool compute = t.at("bound").get<std::string>() == "compute";
    out += fmt::format("  {:<28} {:>6} calls {:>10.3f} ms (host {:.3f}) {:>9.1f} GB/s {:>6.1f}% of copy{} {:>6.1f}% of roofline ({}){}\n",
                       stage, t.at("calls").get<int64_t>(), t.at("device_ms").get<double>(), t.at("host_ms").get<double>(),
                       t.at("gb_per_s").get<double>(), 100.0 * t.at("fraction_of_copy").get<double>(),
                       compute ? fmt::format(" {:>7.1f} TFLOP/s", t.at("tflops").get<double>()) : std::string(17, ' '),
                       100.0 * t.at("fraction_of_roofline").get<double>(), compute ? "compute" : "memory",
                       stage == j.at("dominant").get<std::string>() ? "  (dominant)" : "");
  }
  return out;
}

// ---- one sequence on the device -------------------------------------------------------------

DeviceSequence::DeviceSequence(const StageKernels& kernels, const ref::Recipe& recipe, const ActivationSource& acts,
                               int64_t n, int page_size, const ref::RopeTable& rope, StudyTimings* timings,
                               ContextStore context)
    : kernels_(kernels), recipe_(recipe), acts_(acts), n_(n), page_size_(page_size), timings_(timings),
      context_(context) {
  // The RoPE rows the sequence's positions use, [0, n): the study's table may be longer.
  rope_cos_.assign(rope.cos(0), rope.cos(0) + static_cast<size_t>(n) * 32);
  rope_sin_.assign(rope.sin(0), rope.sin(0) + static_cast<size_t>(n) * 32);
  const int64_t pages = (n + page_size - 1) / page_size;
  page_table_.resize(pages);
  std::iota(page_table_.begin(), page_table_.end(), 0);
  if (context_ == ContextStore::kWithPlants) return;
  const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
  std::vector<float> inputs(static_cast<size_t>(n) * kHeadDim);
  for (int64_t t = 0; t < n; ++t) acts.key_input(t, inputs.data() + t * kHeadDim);
  std::vector<int64_t> positions(n);
  std::iota(positions.begin(), positions.end(), 0);
  cache_ = store(std::vector<uint8_t>(pages * layout.page_bytes(), 0), positions, std::vector<int32_t>(n, 0),
                 page_table_, inputs.data());
}

std::vector<uint8_t> DeviceSequence::store(std::vector<uint8_t> cache, const std::vector<int64_t>& positions,
                                           const std::vector<int32_t>& seq, const std::vector<int32_t>& page_tables,
                                           const float* inputs) const {
  const dev::KernelUnderTest& kernel = *kernels_.keys;
  const int64_t total = static_cast<int64_t>(positions.size());
  const int64_t chunk = kernels_.key_max_tokens > 0 ? kernels_.key_max_tokens : total;
  const int row_bytes = ref::value_bytes_per_head(recipe_.key_quant.format) +
                        ref::scale_bytes_per_head(recipe_.key_quant.format);
  // What every chunk shares; a chunk then sets its inputs, positions and the cache.
  dev::HostKeyBatch b;
  b.bf16 = !kernels_.key_input_fp32;
  b.page_tables = page_tables;
  b.page_table_stride = pages();
  b.page_size = page_size_;
  b.rope_cos = rope_cos_;
  b.rope_sin = rope_sin_;
  if (acts_.norm_weight() != nullptr) b.norm_weight.assign(acts_.norm_weight(), acts_.norm_weight() + kHeadDim);
  if (acts_.norm_bias() != nullptr) b.norm_bias.assign(acts_.norm_bias(), acts_.norm_bias() + kHeadDim);
  b.recipe = recipe_;
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t count = std::min(chunk, total - begin);
    b.input_bf16.clear();
    b.input_f32.clear();
    if (b.bf16) {
      b.input_bf16.resize(count * kHeadDim);
      for (int64_t i = 0; i < count * kHeadDim; ++i) b.input_bf16[i] = ref::encode_bf16(inputs[begin * kHeadDim + i]);
    } else {
      b.input_f32.assign(inputs + begin * kHeadDim, inputs + (begin + count) * kHeadDim);
    }
    b.positions.clear();
    for (int64_t t = begin; t < begin + count; ++t) b.positions.push_back(static_cast<int32_t>(positions[t]));
    b.seq.assign(seq.begin() + begin, seq.begin() + begin + count);
    b.repeated_positions = dev::repeated_positions_of(b.positions);  // the study knows its batch
    b.cache = std::move(cache);
    const double bytes =
        static_cast<double>(count) * (kHeadDim * (b.bf16 ? 2 : 4) + row_bytes) +
        static_cast<double>(count - b.repeated_positions) * kRopeRowPairBytes;
    cache = timed(timings_, "keys", kernel, bytes, [&] { return kernel.key_store(b); });
  }
  return cache;
}

const std::vector<uint8_t>& DeviceSequence::cache() const {
  if (context_ != ContextStore::kNow) {
    throw Error(ErrorKind::kInternal, "DeviceSequence::cache: the sequence is stored with its plants");
  }
  return cache_;
}

DeviceSequence::PlantedKeys DeviceSequence::plant_keys(const std::vector<int64_t>& positions,
                                                       const float* k_inputs) const {
  if (context_ != ContextStore::kWithPlants) {
    throw Error(ErrorKind::kInternal, "DeviceSequence::plant_keys: the sequence was stored on its own");
  }
  const ref::PagedCacheLayout layout(recipe_.key_quant.format, page_size_);
  const int64_t cases = static_cast<int64_t>(positions.size());
  PlantedKeys planted;
  planted.cases = cases;
  // The call's tokens: the sequence's through row 0, then case c's page through row 1 + c
  // (the page holding positions[c]; page_table_ is 0, 1, 2, ...). Sized once: the inputs
  // are the study's largest buffer.
  const auto page_of = [&](int64_t c) { return positions[c] / page_size_; };
  const auto page_end = [&](int64_t page) { return std::min(n_, (page + 1) * page_size_); };
  int64_t tokens = n_;
  for (int64_t c = 0; c < cases; ++c) tokens += page_end(page_of(c)) - page_of(c) * page_size_;
  std::vector<int64_t> token_positions(tokens);
  std::vector<int32_t> seq(tokens, 0);
  std::vector<float> inputs(static_cast<size_t>(tokens) * kHeadDim);
  std::iota(token_positions.begin(), token_positions.begin() + n_, 0);
  for (int64_t t = 0; t < n_; ++t) acts_.key_input(t, inputs.data() + t * kHeadDim);
  std::vector<int32_t> tables(page_table_);
  int64_t next = n_;
  for (int64_t c = 0; c < cases; ++c) {
    const int64_t page = page_of(c);
    std::vector<int32_t> table(page_table_);
    table[page] = static_cast<int32_t>(pages() + c);
    planted.pages.push_back(page);
    tables.insert(tables.end(), table.begin(), table.end());
    planted.page_tables.insert(planted.page_tables.end(), table.begin(), table.end());
    for (int64_t t = page * page_size_; t < page_end(page); ++t, ++next) {
      token_positions[next] = t;
      seq[next] = static_cast<int32_t>(1 + c);
      const float* in = t == positions[c] ? k_inputs + c * kHeadDim : inputs.data() + t * kHeadDim;
      std::copy(in, in + kHeadDim, inputs.begin() + next * kHeadDim);
    }
  }
  planted.cache = store(std::vector<uint8_t>((pages() + cases) * layout.page_bytes(), 0), token_positions, seq,
                        tables, inputs.data());
  return planted;
}

dev::HostQueryResult DeviceSequence::queries(const std::vector<int64_t>& input_tokens,
                                             const std::vector<int64_t>& positions) const {
  const dev::KernelUnderTest& kernel = *kernels_.queries;
  const int H = acts_.num_heads();
  dev::HostQueryBatch b;
  b.num_tokens = static_cast<int64_t>(positions.size());
  b.num_heads = H;
  std::vector<float> q(static_cast<size_t>(H) * kHeadDim), w(H);
  for (size_t i = 0; i < positions.size(); ++i) {
    acts_.query_input(input_tokens[i], q.data(), w.data());
    for (float v : q) b.input_bf16.push_back(ref::encode_bf16(v));
    b.wproj.insert(b.wproj.end(), w.begin(), w.end());
    b.positions.push_back(static_cast<int32_t>(positions[i]));
  }
  b.rope_cos = rope_cos_;
  b.rope_sin = rope_sin_;
  b.recipe = recipe_;
  const int out_bytes = ref::value_bytes_per_head(recipe_.query_quant.format) +
                        ref::scale_bytes_per_head(recipe_.query_quant.format) + 4;
  const double bytes =
      static_cast<double>(b.num_tokens) * H * (kHeadDim * 2 + 4 + out_bytes) +
      static_cast<double>(b.num_tokens - dev::repeated_positions_of(b.positions)) * kRopeRowPairBytes;
  return timed(timings_, "queries", kernel, bytes, [&] { return kernel.query_quant(b); });
}

std::vector<float> DeviceSequence::logits(const std::vector<uint8_t>& cache, const dev::HostQueryResult& q,
                                          const std::vector<int32_t>& valid) const {
  return score(cache, page_table_, pages(), n_, std::vector<int32_t>(valid.size(), 0), q, valid);
}

namespace {

// Query row 0 of `q`, `count` times.
dev::HostQueryResult first_row_times(const dev::HostQueryResult& q, int64_t count, int heads,
                                     const ref::Recipe& recipe) {
  const size_t vb = ref::value_bytes_per_head(recipe.query_quant.format) * heads;
  const size_t sb = ref::scale_bytes_per_head(recipe.query_quant.format) * heads;
  dev::HostQueryResult rows;
  for (int64_t c = 0; c < count; ++c) {
    rows.values.insert(rows.values.end(), q.values.begin(), q.values.begin() + vb);
    rows.scales.insert(rows.scales.end(), q.scales.begin(), q.scales.begin() + sb);
    rows.weights.insert(rows.weights.end(), q.weights.begin(), q.weights.begin() + heads);
  }
  return rows;
}

}  // namespace

std::vector<float> DeviceSequence::logits(const PlantedKeys& planted, const dev::HostQueryResult& q) const {
  const int H = acts_.num_heads();
  // The context's row: its pages come first in the planted cache, through the identity table.
  const std::vector<float> context =
      score(planted.cache, page_table_, pages(), n_, {0}, first_row_times(q, 1, H, recipe_), {static_cast<int32_t>(n_)});
  // Case c's page alone: a sequence of one page, the case's private copy, its tokens valid.
  std::vector<int32_t> tables, seq, valid;
  for (int64_t c = 0; c < planted.cases; ++c) {
    const int64_t first = planted.pages[c] * page_size_;
    tables.push_back(static_cast<int32_t>(pages() + c));
    seq.push_back(static_cast<int32_t>(c));
    valid.push_back(static_cast<int32_t>(std::min<int64_t>(n_, first + page_size_) - first));
  }
  const std::vector<float> page_rows =
      score(planted.cache, tables, 1, page_size_, seq, first_row_times(q, planted.cases, H, recipe_), valid);
  std::vector<float> rows(static_cast<size_t>(planted.cases) * n_);
  for (int64_t c = 0; c < planted.cases; ++c) {
    float* row = rows.data() + c * n_;
    std::copy(context.begin(), context.end(), row);
    const float* page = page_rows.data() + c * page_size_;
    std::copy(page, page + valid[c], row + planted.pages[c] * page_size_);
  }
  return rows;
}

std::vector<float> DeviceSequence::score(const std::vector<uint8_t>& cache, const std::vector<int32_t>& page_tables,
                                         int64_t page_table_stride, int64_t max_context,
                                         const std::vector<int32_t>& row_seq, const dev::HostQueryResult& q,
                                         const std::vector<int32_t>& valid) const {
  const dev::KernelUnderTest& kernel = *kernels_.logits;
  dev::HostLogitsBatch b;
  b.q_values = q.values;
  b.q_scales = q.scales;
  b.weights = q.weights;
  b.q_format = recipe_.query_quant.format;
  b.k_format = recipe_.key_quant.format;
  b.accum = recipe_.score;
  b.num_heads = acts_.num_heads();
  b.row_seq = row_seq;
  b.row_valid = valid;
  b.cache = cache;
  b.page_size = page_size_;
  b.page_tables = page_tables;
  b.page_table_stride = page_table_stride;
  b.max_context = max_context;
  // The study is its kernel's own caller and knows its rows: queries of one sequence, or
  // a needle's pages each in a sequence of its own (our kernels take the hint natively;
  // a plug-in, through the ABI, never sees it).
  b.shared_row_run = dev::shared_row_run_of(row_seq.data(), static_cast<int>(row_seq.size()));
  const int row_bytes = ref::value_bytes_per_head(b.k_format) + ref::scale_bytes_per_head(b.k_format);
  // Every cache page the rows read, once, up to the furthest token any row reads in it.
  const ref::PagedCacheLayout layout(b.k_format, page_size_);
  std::vector<int64_t> tokens_read(cache.size() / layout.page_bytes());
  for (size_t i = 0; i < row_seq.size(); ++i) {
    for (int64_t first = 0; first < valid[i]; first += page_size_) {
      const int32_t page = page_tables[row_seq[i] * page_table_stride + first / page_size_];
      tokens_read[page] = std::max<int64_t>(tokens_read[page], std::min<int64_t>(page_size_, valid[i] - first));
    }
  }
  const double keys_read = static_cast<double>(std::accumulate(tokens_read.begin(), tokens_read.end(), int64_t{0}));
  const double bytes = static_cast<double>(q.values.size() + q.scales.size() + 4 * q.weights.size()) +
                       keys_read * row_bytes + 4.0 * static_cast<double>(valid.size()) * static_cast<double>(max_context);
  // A multiply-add per head, dim, row and key scored; on the tensor cores of the cache's
  // format under the bounded contract, on fp32 FMA lanes in exact order.
  double keys_scored = 0.0;
  for (int32_t v : valid) keys_scored += v;
  const double flops = 2.0 * static_cast<double>(q.weights.size()) * kHeadDim * keys_scored /
                       static_cast<double>(valid.size());
  const ComputeUnit unit = kernels_.logits_exact_order                   ? ComputeUnit::kFp32Fma
                           : b.k_format == ref::StorageFormat::kFp8E4m3fn ? ComputeUnit::kTensorFp8
                                                                          : ComputeUnit::kTensorBf16;
  return timed(
      timings_, "logits", kernel, bytes, [&] { return kernel.paged_logits(b); }, flops, unit);
}

std::vector<int32_t> DeviceSequence::topk(const std::vector<float>& logits, const std::vector<int32_t>& valid,
                                          int k) const {
  const dev::KernelUnderTest& kernel = *kernels_.topk;
  dev::HostTopKBatch b;
  b.scores = logits;
  b.row_stride = n_;
  b.valid_lengths = valid;
  b.k = k;
  double bytes = 4.0 * static_cast<double>(valid.size()) * k;
  for (int32_t v : valid) bytes += 4.0 * v;
  return timed(timings_, "topk", kernel, bytes, [&] { return kernel.topk(b); });
}

// ---- the reference's checks -----------------------------------------------------------------

void check_key_slots(const std::string& where, const ref::Recipe& recipe, const ActivationSource& acts,
                     const ref::RopeTable& rope, const std::vector<uint8_t>& cache, int page_size,
                     const std::vector<int64_t>& positions, const std::vector<float>& k_inputs,
                     const int32_t* page_table) {
  const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
  const ref::NormParams norm{acts.norm_weight(), acts.norm_bias()};
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t p = positions[i];
    const ref::StoredHead want =
        ref::run_key_path(recipe, k_inputs.data() + i * kHeadDim, static_cast<int>(p), norm, rope);
    const ref::CacheLocation at{page_table != nullptr ? page_table[p / page_size] : p / page_size,
                                static_cast<int>(p % page_size)};
    const int64_t value_at = layout.value_offset(at), scale_at = layout.scale_offset(at);
    const auto compare = [&](const std::vector<uint8_t>& expected, int64_t offset, const char* part) {
      const int64_t d = first_difference(cache.data() + offset, expected.data(), expected.size());
      if (d < 0) return;
      mismatch(where, fmt::format("the key cache's {} bytes of position {} differ from the reference's from byte "
                                  "{}: kernel {}, reference {}",
                                  part, p, d, hex(cache, offset, expected.size()),
                                  hex(expected, 0, expected.size())));
    };
    compare(want.value_bytes, value_at, "value");
    compare(want.scale_bytes, scale_at, "scale");
  }
}

void check_query_row(const std::string& where, const ref::Recipe& recipe, const dev::HostQueryResult& kernel,
                     int64_t row, const ref::QueryOutput& expected) {
  const int H = static_cast<int>(expected.heads.size());
  const size_t vb = ref::value_bytes_per_head(recipe.query_quant.format);
  const size_t sb = ref::scale_bytes_per_head(recipe.query_quant.format);
  // As verify: a kernel may fold the fp8 per-head scale into the head weight and never
  // write it (SGLang's V4 query kernel); every scale byte of the batch is then the 0 the
  // buffer started with, which no fp8 scale is (amax_floor > 0), the logits do not read
  // them, and the weights, compared bit for bit, carry the scale. fp4 block scales are
  // read by the logits: a kernel must write them.
  const bool scales_folded = recipe.query_quant.format == ref::StorageFormat::kFp8E4m3fn && !kernel.scales.empty() &&
                             std::all_of(kernel.scales.begin(), kernel.scales.end(), [](uint8_t b) { return b == 0; });
  for (int h = 0; h < H; ++h) {
    const size_t head = static_cast<size_t>(row) * H + h;
    const auto& want = expected.heads[h];
    const int64_t dv = first_difference(kernel.values.data() + head * vb, want.value_bytes.data(), vb);
    const int64_t ds =
        scales_folded ? -1 : first_difference(kernel.scales.data() + head * sb, want.scale_bytes.data(), sb);
    const float w = static_cast<float>(expected.weights[h]);
    if (dv >= 0 || ds >= 0 || bits_of(kernel.weights[head]) != bits_of(w)) {
      mismatch(where, fmt::format("query row {} head {}: {} differ from the reference's (kernel weight {:a}, "
                                  "reference {:a})",
                                  row, h, dv >= 0 ? "the codes" : ds >= 0 ? "the scales" : "the folded weights",
                                  kernel.weights[head], w));
    }
  }
}

void check_logits_row(const std::string& where, bool exact_order, const float* row, int64_t valid, int64_t n,
                      const std::vector<double>& expected, const std::vector<double>& exact,
                      const std::vector<double>& bound) {
  for (int64_t s = 0; s < n; ++s) {
    if (s >= valid) {
      if (!(std::isinf(row[s]) && row[s] < 0)) {
        mismatch(where, fmt::format("logit of key {} (past the row's {} valid keys) is {:a}, not -inf", s, valid, row[s]));
      }
      continue;
    }
    if (exact_order) {
      const float want = static_cast<float>(expected[s]);
      if (bits_of(row[s]) != bits_of(want)) {
        mismatch(where, fmt::format("logit of key {} is {:a} (bits {:08x}); the reference's exact-order score is "
                                    "{:a} (bits {:08x})",
                                    s, row[s], bits_of(row[s]), want, bits_of(want)));
      }
    } else if (!(std::fabs(static_cast<double>(row[s]) - exact[s]) <= bound[s])) {
      mismatch(where, fmt::format("logit of key {} is {:a}, {:.3g} from the exact score {:a}: past the bounded "
                                  "contract's {:.3g}",
                                  s, row[s], std::fabs(static_cast<double>(row[s]) - exact[s]), exact[s], bound[s]));
    }
  }
}

void check_topk_row(const std::string& where, const StageKernels& kernels, const float* logits_row, int64_t valid,
                    int k, const int32_t* entries) {
  const std::vector<float> scores(logits_row, logits_row + valid);
  const TopKRowVerdict v = judge_topk_row(scores, k, std::vector<int32_t>(entries, entries + k),
                                          kernels.topk_contract, kernels.topk_padding);
  if (!v.pass) {
    mismatch(where, fmt::format("the top-K row breaks its {} contract over the kernel's own logits: {}",
                                to_string(kernels.topk_contract), v.describe()));
  }
}

std::vector<int32_t> canonical_selection(const std::string& where, const float* logits_row, int64_t valid, int k,
                                         const int32_t* entries) {
  const int64_t m = std::min<int64_t>(k, valid);
  std::vector<int32_t> out(entries, entries + m);
  std::vector<int32_t> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < m; ++i) {
    if (sorted[i] < 0 || sorted[i] >= valid || (i > 0 && sorted[i] == sorted[i - 1])) {
      mismatch(where, fmt::format("the top-K entries hold {} {} among the first {} (keys 0..{} are valid)",
                                  i > 0 && sorted[i] == sorted[i - 1] ? "a duplicate" : "an invalid index",
                                  sorted[i], m, valid - 1));
    }
  }
  std::stable_sort(out.begin(), out.end(), [&](int32_t a, int32_t b) {
    const float sa = logits_row[a], sb = logits_row[b];
    return sa > sb || (sa == sb && a < b);
  });
  out.resize(k, -1);
  return out;
}

void check_no_nan(const std::string& where, const float* logits_row, int64_t valid) {
  for (int64_t s = 0; s < valid; ++s) {
    if (std::isnan(logits_row[s])) mismatch(where, fmt::format("logit of key {} is NaN (bits {:08x})", s, bits_of(logits_row[s])));
  }
}

LogitsExpectation expect_logits(const ref::Recipe& recipe, bool exact_order, const ref::QueryOutput& q,
                                const ref::KeyMatrix& keys, int64_t valid, int threads) {
  LogitsExpectation e;
  const ref::PreparedQuery prepared = ref::prepare_query(q.heads, q.weights);
  if (exact_order) {
    e.expected = index_scores(prepared, keys, valid, recipe.score, threads);
    return e;
  }
  e.exact = index_scores(prepared, keys, valid, ref::ScoreAccum::kExact, threads);
  e.bound.resize(valid);
  const int heads = static_cast<int>(q.heads.size());
  parallel_for(valid, valid >= kMinKeysPerThread ? threads : 1, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      e.bound[s] = bounded_logit_error(recipe.key_quant.format, heads, keys.dot_scales[s],
                                       weighted_magnitude(q, keys.dot_values.data() + s * kHeadDim));
    }
  });
  return e;
}

std::vector<int64_t> sample_rows(int64_t rows, int count, uint64_t seed) {
  std::vector<int64_t> all(rows);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min<int64_t>(rows, std::max(0, count)));
  std::sort(all.begin(), all.end());
  return all;
}

}  // namespace dsaf::oracle
