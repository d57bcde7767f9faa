// The studies' device mode (oracle/study_device.h) without a GPU: the kernel under test is
// the reference itself behind the KernelUnderTest interface (key store into the paged
// cache, query path, exact-order logits decoded from the cache bytes it is given, top-K),
// so that
//  - a device sweep and a device needle give what the CPU study gives on the same (bf16-
//    rounded) activations, number for number;
//  - each way a kernel can be wrong — a logit's bit, a cache byte, a query weight, a top-K
//    entry, a NaN — stops the study with a kMismatch that names where;
//  - stages the kernel lacks run on the fallback, and the result says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "device/api.h"
#include "oracle/needle.h"
#include "oracle/parallel.h"
#include "oracle/results_io.h"
#include "oracle/study_device.h"
#include "oracle/sweep.h"
#include "oracle/synthetic.h"
#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/rope.h"
#include "reference/score.h"
#include "reference/topk.h"
#include "tests/oracle/reference_query.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;

enum class Fault { kNone, kLogitBit, kCacheByte, kQueryWeight, kQueryScale, kFoldedScales, kTopKEntry, kNanLogit };

struct Provides {
  bool key_store = true, query_path = true, logits = true, topk = true;
};

// The reference as a kernel under test, with one fault injected where the study reads.
class ReferenceKernel : public dev::KernelUnderTest {
 public:
  ReferenceKernel(std::string name, Fault fault = Fault::kNone, Provides provides = {})
      : name_(std::move(name)), fault_(fault), provides_(provides) {}
  std::string name() const override { return name_; }
  dev::KernelCapabilities capabilities() const override {
    dev::KernelCapabilities c;
    c.key_store = provides_.key_store;
    c.query_path = provides_.query_path;
    c.paged_logits = provides_.logits;
    c.topk = provides_.topk;
    c.store_formats = 0x3Eu;
    c.page_sizes = 0x1FFu;
    c.bf16_input = c.fp32_input = true;
    return c;
  }
  static ref::Recipe recipe_of(const ref::RecipeFields& fields) {
    ref::Recipe r;
    static_cast<ref::RecipeFields&>(r) = fields;
    return r;
  }
  static ref::RopeTable rope_of(const std::vector<float>& cos, const std::vector<float>& sin) {
    return ref::RopeTable(cos, sin);
  }
  std::vector<uint8_t> key_store(const dev::HostKeyBatch& b) const override {
    const ref::Recipe recipe = recipe_of(b.recipe);
    const ref::RopeTable rope = rope_of(b.rope_cos, b.rope_sin);
    const ref::PagedCacheLayout layout(recipe.key_quant.format, b.page_size);
    const ref::NormParams norm{b.norm_weight.empty() ? nullptr : b.norm_weight.data(),
                               b.norm_bias.empty() ? nullptr : b.norm_bias.data()};
    std::vector<uint8_t> cache = b.cache;
    float in[kHeadDim];
    for (size_t t = 0; t < b.positions.size(); ++t) {
      for (int i = 0; i < kHeadDim; ++i) {
        in[i] = b.bf16 ? ref::decode_bf16(b.input_bf16[t * kHeadDim + i]) : b.input_f32[t * kHeadDim + i];
      }
      const int p = b.positions[t];
      const std::vector<int32_t> table(b.page_tables.begin() + b.seq[t] * b.page_table_stride,
                                       b.page_tables.begin() + (b.seq[t] + 1) * b.page_table_stride);
      layout.store(cache, layout.locate(table, p, static_cast<int64_t>(cache.size() / layout.page_bytes())),
                   ref::run_key_path(recipe, in, p, norm, rope));
    }
    if (fault_ == Fault::kCacheByte && b.positions.size() > 1) cache[layout.value_offset({0, 5}) + 3] ^= 0x01;
    return cache;
  }
  dev::HostQueryResult query_quant(const dev::HostQueryBatch& q) const override {
    dev::HostQueryResult out = test::reference_query_quant(recipe_of(q.recipe), q);
    if (fault_ == Fault::kQueryWeight) out.weights.back() = std::nextafter(out.weights.back(), 1e30f);
    if (fault_ == Fault::kQueryScale) out.scales.back() ^= 0x01;
    // Scales folded into the weights and never written (the logits below do not read fp8 q
    // scales: the weights carry them).
    if (fault_ == Fault::kFoldedScales) std::fill(out.scales.begin(), out.scales.end(), 0);
    return out;
  }
  // Exact-order logits from the bytes given: the cache's keys and the queries' codes
  // decoded by the reference's codec (a one-token page of the query format is its value
  // bytes followed by its scale bytes).
  std::vector<float> paged_logits(const dev::HostLogitsBatch& b) const override {
    const ref::PagedCacheLayout keys_layout(b.k_format, b.page_size);
    const ref::PagedCacheLayout head_layout(b.q_format, 1);
    const size_t vb = ref::value_bytes_per_head(b.q_format), sb = ref::scale_bytes_per_head(b.q_format);
    const int rows = static_cast<int>(b.row_seq.size());
    std::vector<float> logits(static_cast<size_t>(rows) * b.max_context, -INFINITY);
    for (int r = 0; r < rows; ++r) {
      const std::vector<int32_t> table(b.page_tables.begin() + b.row_seq[r] * b.page_table_stride,
                                       b.page_tables.begin() + (b.row_seq[r] + 1) * b.page_table_stride);
      ref::KeyMatrix keys;
      for (int64_t s = 0; s < b.row_valid[r]; ++s) {
        keys.append(keys_layout.load(b.cache, keys_layout.locate(table, s, b.cache.size() / keys_layout.page_bytes())));
      }
      std::vector<ref::StoredHead> heads;
      std::vector<double> weights;
      for (int h = 0; h < b.num_heads; ++h) {
        const size_t at = static_cast<size_t>(r) * b.num_heads + h;
        std::vector<uint8_t> one(b.q_values.begin() + at * vb, b.q_values.begin() + (at + 1) * vb);
        one.insert(one.end(), b.q_scales.begin() + at * sb, b.q_scales.begin() + (at + 1) * sb);
        heads.push_back(head_layout.load(one, {0, 0}));
        weights.push_back(b.weights[at]);
      }
      const std::vector<double> s = ref::index_scores(ref::prepare_query(heads, weights), keys, b.row_valid[r], b.accum);
      for (int64_t k = 0; k < b.row_valid[r]; ++k) logits[static_cast<size_t>(r) * b.max_context + k] = static_cast<float>(s[k]);
    }
    if (fault_ == Fault::kLogitBit) {
      float& v = logits[static_cast<size_t>(rows - 1) * b.max_context + 17];
      uint32_t u;
      std::memcpy(&u, &v, 4);
      u ^= 1u;
      std::memcpy(&v, &u, 4);
    }
    if (fault_ == Fault::kNanLogit) logits[static_cast<size_t>(rows - 1) * b.max_context + 9] = NAN;
    return logits;
  }
  std::vector<int32_t> topk(const dev::HostTopKBatch& b) const override {
    std::vector<int32_t> out;
    for (size_t r = 0; r < b.valid_lengths.size(); ++r) {
      const std::vector<double> row(b.scores.begin() + r * b.row_stride, b.scores.begin() + r * b.row_stride + b.valid_lengths[r]);
      const std::vector<int32_t> sel = ref::select_topk(row, b.valid_lengths[r], b.k);
      out.insert(out.end(), sel.begin(), sel.end());
    }
    // The last row loses its best key and keeps the (K+1)-th instead.
    if (fault_ == Fault::kTopKEntry) {
      const size_t r = b.valid_lengths.size() - 1;
      const std::vector<double> row(b.scores.begin() + r * b.row_stride, b.scores.begin() + r * b.row_stride + b.valid_lengths[r]);
      out[r * b.k] = ref::select_topk(row, b.valid_lengths[r], b.k + 1).back();
    }
    return out;
  }

 private:
  std::string name_;
  Fault fault_;
  Provides provides_;
};

SyntheticSpec spec() {
  SyntheticSpec s;
  s.kind = ActivationKind::kOutliers;
  s.seed = 11;
  s.num_heads = 8;
  return s;
}

SweepConfig sweep_config(const std::string& recipe) {
  SweepConfig c;
  c.recipes = {ref::preset(recipe)};
  c.contexts = {300, 700};
  c.seeds = {1};
  c.queries = 6;
  c.topk = 32;
  c.threads = 2;
  return c;
}

// What the device mode rounds for our reference kernel (fp32 inputs): the query inputs.
std::shared_ptr<const ActivationSource> rounded(const SweepConfig& c) {
  InputRounding r;
  r.query_input = true;
  return rounded_inputs(std::make_shared<SyntheticActivations>(c.activations), r);
}

class DeviceStudy : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceStudy, SweepEqualsTheCpuSweepOnTheSameActivations) {
  SweepConfig cpu = sweep_config(GetParam());
  cpu.activations = spec();
  cpu.source = rounded(cpu);
  SweepConfig gpu = cpu;
  const ReferenceKernel kernel("reference"), fallback("fallback");
  gpu.device.kernel = &kernel;
  gpu.device.fallback = &fallback;
  gpu.device.check_rows = 6;
  gpu.device.check_keys = 700;
  StudyTimings timings;
  gpu.device.timings = &timings;
  const SweepResult a = run_sweep(cpu, {});
  const SweepResult b = run_sweep(gpu, {});
  nlohmann::json ja = sweep_to_json(a, ""), jb = sweep_to_json(b, "");
  ASSERT_TRUE(jb.contains("device"));
  EXPECT_EQ(jb["device"]["stages"][GetParam()]["logits"], "reference");
  EXPECT_EQ(jb["device"]["stages"][GetParam()]["logits_contract"], "exact-order");
  jb.erase("device");
  EXPECT_EQ(ja.dump(), jb.dump());
  EXPECT_EQ(timings.stages.at("keys [reference]").calls, 2);
  EXPECT_EQ(timings.stages.at("topk [reference]").calls, 2);
  // The key stage's traffic: each token's fp32 input (the kernel takes fp32) and stored
  // row, and the RoPE row pair (2 x 32 fp32) of each distinct position; a context's
  // positions are 0..n-1, all distinct.
  const ref::StorageFormat format = ref::preset(GetParam()).key_quant.format;
  const double row = ref::value_bytes_per_head(format) + ref::scale_bytes_per_head(format);
  EXPECT_DOUBLE_EQ(timings.stages.at("keys [reference]").bytes, (300 + 700) * (128 * 4 + row + 2 * 32 * 4));
}

TEST_P(DeviceStudy, NeedleEqualsTheCpuNeedleOnTheSameActivations) {
  NeedleConfig cpu;
  cpu.recipes = {ref::preset(GetParam())};
  cpu.contexts = {400};
  cpu.depths = {0.2, 0.7};
  cpu.margins = {0.0, 0.5, 2.0};
  cpu.trials = 2;
  cpu.topk = 16;
  cpu.reference_context = 200;
  cpu.activations = spec();
  InputRounding r;
  r.query_input = true;
  cpu.source = rounded_inputs(std::make_shared<SyntheticActivations>(spec()), r);
  NeedleConfig gpu = cpu;
  const ReferenceKernel kernel("reference"), fallback("fallback");
  gpu.device.kernel = &kernel;
  gpu.device.fallback = &fallback;
  gpu.device.check_rows = 6;
  StudyTimings timings;
  gpu.device.timings = &timings;
  const NeedleResult a = run_needle(cpu, {});
  const NeedleResult b = run_needle(gpu, {});
  nlohmann::json ja = needle_to_json(a, ""), jb = needle_to_json(b, "");
  ASSERT_TRUE(jb.contains("device"));
  jb.erase("device");
  EXPECT_EQ(ja.dump(), jb.dump());
  // A trial's reachable cases are one batch of rows: two logits calls (the context's row,
  // then each case's page) and one top-K call for each trial (one context, one recipe) with
  // a reachable case, not calls a case.
  int64_t reachable = 0;
  std::set<int> batched_trials;
  for (const NeedleCase& c : b.cases) {
    if (c.reachable) batched_trials.insert(c.trial), ++reachable;
  }
  EXPECT_GT(reachable, 0);
  ASSERT_GT(reachable, static_cast<int64_t>(batched_trials.size()));  // some batch holds several cases
  EXPECT_EQ(timings.stages.at("logits [reference]").calls, 2 * static_cast<int64_t>(batched_trials.size()));
  EXPECT_EQ(timings.stages.at("topk [reference]").calls, static_cast<int64_t>(batched_trials.size()));
  // Each key call stores the 400-token context and, for each of its trial's planted cases,
  // the kNeedlePageSize-token page holding the needle again (DeviceSequence::plant_keys),
  // at positions the context already has: every token's input and row count, the RoPE
  // row pairs only once a position, so what is left past the context's 400 is whole pages.
  const ref::StorageFormat format = ref::preset(GetParam()).key_quant.format;
  const double token = 128 * 4 + ref::value_bytes_per_head(format) + ref::scale_bytes_per_head(format);
  const StageTiming& keys = timings.stages.at("keys [reference]");
  const double planted = (keys.bytes - static_cast<double>(keys.calls) * 400 * (token + 2 * 32 * 4)) / token;
  constexpr double kPage = kNeedlePageSize;
  EXPECT_EQ(planted, kPage * std::round(planted / kPage));
  EXPECT_GE(planted, kPage);
  EXPECT_LE(planted, kPage * static_cast<double>(b.cases.size()));
}

INSTANTIATE_TEST_SUITE_P(Recipes, DeviceStudy, ::testing::Values("sglang-v4-fp8", "dsv32-ref", "sglang-v4-bf16"));

// A sweep of a faulty kernel with `check_rows` rows and `check_keys` slots rechecked: the
// message of the kMismatch that stopped it, or "" when it ran to the end.
std::string faulty_sweep(Fault fault, int check_rows, int check_keys) {
  SweepConfig c = sweep_config("sglang-v4-fp8");
  c.activations = spec();
  const ReferenceKernel kernel("faulty", fault), fallback("fallback");
  c.device.kernel = &kernel;
  c.device.fallback = &fallback;
  c.device.check_rows = check_rows;
  c.device.check_keys = check_keys;
  try {
    run_sweep(c, {});
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kMismatch) << e.what();
    return e.what();
  }
  return "";
}

void expect_mismatch(Fault fault, const std::string& where) {
  const std::string message = faulty_sweep(fault, 6, 300);
  EXPECT_NE(message.find(where), std::string::npos) << "expected: " << where << "\ngot: " << message;
}

TEST(DeviceStudyChecks, AFlippedLogitBitIsLocated) {
  expect_mismatch(Fault::kLogitBit, "query row 5 (position 174): logit of key 17 is");
}
TEST(DeviceStudyChecks, AFlippedCacheByteIsLocated) {
  expect_mismatch(Fault::kCacheByte, "the key cache's value bytes of position 5 differ from the reference's from byte 3");
}
TEST(DeviceStudyChecks, AWrongFoldedWeightIsLocated) {
  expect_mismatch(Fault::kQueryWeight, "query row 5 head 7: the folded weights differ");
}
TEST(DeviceStudyChecks, AWrongQueryScaleIsLocatedAndFoldedScalesPass) {
  expect_mismatch(Fault::kQueryScale, "query row 5 head 7: the scales differ");
  EXPECT_EQ(faulty_sweep(Fault::kFoldedScales, 6, 300), "");
}
TEST(DeviceStudyChecks, ADroppedTopKEntryIsLocated) {
  expect_mismatch(Fault::kTopKEntry, "query row 5 (position 174): the top-K row breaks its ordered contract");
}
TEST(DeviceStudyChecks, ANanLogitIsLocatedInARowNotSampled) {
  const std::string message = faulty_sweep(Fault::kNanLogit, 0, 0);
  EXPECT_NE(message.find("query row 5: logit of key 9 is NaN"), std::string::npos) << message;
}
TEST(DeviceStudyChecks, WithoutSamplesAFlippedBitPassesUnseen) {
  // What the sample size buys: with no rows rechecked a wrong logit goes through.
  EXPECT_EQ(faulty_sweep(Fault::kLogitBit, 0, 300), "");
}

TEST(DeviceStudyStages, StagesTheKernelLacksRunOnTheFallback) {
  SweepConfig c = sweep_config("sglang-v4-fp8");
  c.activations = spec();
  Provides keys_only;
  keys_only.query_path = keys_only.logits = keys_only.topk = false;
  const ReferenceKernel kernel("keys-only", Fault::kNone, keys_only), fallback("ours");
  c.device.kernel = &kernel;
  c.device.fallback = &fallback;
  const nlohmann::json d = sweep_layout(c).device;
  const nlohmann::json& s = d["stages"]["sglang-v4-fp8"];
  EXPECT_EQ(s["keys"], "keys-only");
  EXPECT_EQ(s["queries"], "ours");
  EXPECT_EQ(s["logits"], "ours");
  EXPECT_EQ(s["topk"], "ours");
  EXPECT_EQ(d["kernel"], "keys-only");
}

TEST(DeviceStudyStages, AnExactScoreAndAttributionAreRefused) {
  SweepConfig c = sweep_config("sglang-v4-fp8");
  const ReferenceKernel kernel("reference"), fallback("ours");
  c.device.kernel = &kernel;
  c.device.fallback = &fallback;
  c.attribution = true;
  EXPECT_THROW(sweep_layout(c), Error);
  c.attribution = false;
  c.recipes[0].score = ref::ScoreAccum::kExact;
  try {
    sweep_layout(c);
    ADD_FAILURE() << "an exact score accumulation was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("score accumulation exact"), std::string::npos) << e.what();
  }
}

TEST(DeviceStudyRounding, RoundsWhatTheKernelTakesInBf16AndSaysSo) {
  InputRounding r;
  r.key_input = r.query_input = r.head_weights = true;
  const auto base = std::make_shared<SyntheticActivations>(spec());
  const auto source = rounded_inputs(base, r);
  float k[kHeadDim], q[8 * kHeadDim], w[8];
  source->key_input(3, k);
  source->query_input(3, q, w);
  for (float v : k) EXPECT_EQ(v, ref::round_bf16(v));
  for (float v : q) EXPECT_EQ(v, ref::round_bf16(v));
  for (float v : w) EXPECT_EQ(v, ref::round_bf16(v));
  float raw[kHeadDim];
  base->key_input(3, raw);
  bool changed = false;
  for (int i = 0; i < kHeadDim; ++i) changed = changed || raw[i] != k[i];
  EXPECT_TRUE(changed);
  EXPECT_EQ(source->describe()["rounded_to_bf16"].size(), 3u);
  EXPECT_EQ(rounded_inputs(base, InputRounding{}), base);
}

// Scores over key ranges on threads, and the bounded expectation built from them, are the
// one-thread values bit for bit: 10,000 keys of an fp8 and a bf16 recipe (three ranges on
// three threads; one range below kMinKeysPerThread keys), 8 heads.
TEST(DeviceStudyScores, ThreadsGiveTheOneThreadValues) {
  const int kHeads = 8;
  const int64_t kKeys = 10000;
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const char* name : {"sglang-v4-fp8", "sglang-v4-bf16"}) {
    const ref::Recipe& recipe = ref::preset(name);
    const ref::RopeTable rope(recipe.rope.table, kKeys);
    std::vector<float> norm_weight(kHeadDim), norm_bias(kHeadDim);
    for (int i = 0; i < kHeadDim; ++i) norm_weight[i] = 1.0f + 0.1f * normal(rng), norm_bias[i] = 0.1f * normal(rng);
    const ref::NormParams norm{norm_weight.data(), norm_bias.data()};
    ref::KeyMatrix keys;
    std::vector<float> row(kHeadDim);
    for (int64_t s = 0; s < kKeys; ++s) {
      for (float& v : row) v = normal(rng);
      keys.append(ref::run_key_path(recipe, row.data(), static_cast<int>(s), norm, rope));
    }
    std::vector<float> q_in(static_cast<size_t>(kHeads) * kHeadDim), wproj(kHeads);
    for (float& v : q_in) v = normal(rng);
    for (float& v : wproj) v = normal(rng);
    const ref::QueryOutput q = ref::run_query_path(recipe, q_in.data(), kHeads, wproj.data(), kKeys - 1, rope);
    const ref::PreparedQuery prepared = ref::prepare_query(q.heads, q.weights);
    for (const ref::ScoreAccum accum : {recipe.score, ref::ScoreAccum::kExact}) {
      const std::vector<double> serial = ref::index_scores(prepared, keys, kKeys, accum);
      EXPECT_EQ(index_scores(prepared, keys, kKeys, accum, 3), serial) << name;
      EXPECT_EQ(index_scores(prepared, keys, 3000, accum, 3),
                std::vector<double>(serial.begin(), serial.begin() + 3000)) << name;
    }
    const LogitsExpectation one = expect_logits(recipe, false, q, keys, kKeys, 1);
    const LogitsExpectation three = expect_logits(recipe, false, q, keys, kKeys, 3);
    EXPECT_EQ(three.exact, one.exact) << name;
    EXPECT_EQ(three.bound, one.bound) << name;
    EXPECT_EQ(expect_logits(recipe, true, q, keys, kKeys, 3).expected, ref::index_scores(prepared, keys, kKeys, recipe.score));
  }
}

TEST(DeviceStudyTimings, TheDominantStageIsTheOneWithTheMostDeviceTime) {
  StudyTimings t;
  t.stages["keys"] = {"k", 1, 0.2, 2.0e8, {}};
  t.stages["logits"] = {"l", 1, 0.5, 1.5e9, {}, 0.125};
  const nlohmann::json j = t.to_json(Roofline{4000.0});
  EXPECT_EQ(j["dominant"], "logits");
  EXPECT_DOUBLE_EQ(j["stages"]["logits"]["host_ms"].get<double>(), 0.125);  // reported beside, never in a fraction
  EXPECT_NE(t.text(Roofline{4000.0}).find("(host 0.125)"), std::string::npos);
  EXPECT_DOUBLE_EQ(j["stages"]["logits"]["gb_per_s"].get<double>(), 3000.0);
  EXPECT_DOUBLE_EQ(j["stages"]["logits"]["fraction_of_copy"].get<double>(), 0.75);
  EXPECT_EQ(j["stages"]["logits"]["bound"], "memory");  // no arithmetic counted
  EXPECT_DOUBLE_EQ(j["stages"]["logits"]["fraction_of_roofline"].get<double>(), 0.75);
}

// The floor is the larger of traffic over the copy bandwidth and arithmetic over its
// unit's peak: 1e12 flops on fp8 tensor cores of 2,000 TFLOP/s take at least 0.5 ms,
// more than 1.5e9 bytes at 4,000 GB/s (0.375 ms); done in 1 ms that is half the roofline.
TEST(DeviceStudyTimings, AStageIsJudgedAgainstTheLargerOfItsTwoFloors) {
  StudyTimings t;
  t.stages["logits"] = {"l", 1, 1.0, 1.5e9, {{ComputeUnit::kTensorFp8, 1.0e12}}};
  t.stages["topk"] = {"t", 1, 0.75, 1.5e9, {}};
  const Roofline roofline{4000.0, 2000.0, 1000.0, 60.0};
  const nlohmann::json j = t.to_json(roofline);
  const nlohmann::json& logits = j["stages"]["logits"];
  EXPECT_EQ(logits["bound"], "compute");
  EXPECT_DOUBLE_EQ(logits["floor_ms"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(logits["fraction_of_roofline"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(logits["tflops"].get<double>(), 1000.0);
  EXPECT_EQ(j["stages"]["topk"]["bound"], "memory");
  EXPECT_DOUBLE_EQ(j["stages"]["topk"]["fraction_of_roofline"].get<double>(), 0.5);
  // Half of it on bf16 tensor cores (half the peak): 0.25 + 0.5 ms, three quarters.
  t.stages["logits"].flops = {{ComputeUnit::kTensorFp8, 0.5e12}, {ComputeUnit::kTensorBf16, 0.5e12}};
  EXPECT_DOUBLE_EQ(t.to_json(roofline)["stages"]["logits"]["fraction_of_roofline"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(t.to_json(roofline)["stages"]["logits"]["flops"].get<double>(), 1.0e12);
  EXPECT_NE(t.text(roofline).find("(compute)"), std::string::npos);
}

}  // namespace
}  // namespace dsaf::oracle
