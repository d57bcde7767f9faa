// The studies' device mode on the GPU (oracle/study_device.h, docs/device-studies.md):
//  - with our exact-order kernels ("builtin"), a device sweep and a device needle give
//    the CPU study's result number for number (on the same bf16-rounded query inputs),
//    every row and case rechecked by the reference, with every entry point called twice
//    (warm timing, as the CLI's studies run: the second call's outputs are the study's);
//  - with the tensor-core logits ("builtin-fast") every rechecked score lies within the
//    bounded contract, and fp4 caches, which that bound does not cover, fall back to the
//    exact-order kernel;
//  - `sweep --device gpu` with a gallery plug-in (docs/gallery.md) stops with exit 1 and
//    the located mismatch; with no rechecks it runs to the end and shows what the bug
//    costs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device/api.h"
#include "oracle/needle.h"
#include "oracle/results_io.h"
#include "oracle/study_device.h"
#include "oracle/sweep.h"
#include "oracle/synthetic.h"
#include "reference/error.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/rope.h"
#include "tests/cli/cli_run.h"

namespace dsaf::oracle {
namespace {

class StudyDeviceGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (dev::query_gpu().device_count == 0) GTEST_SKIP() << "no GPU";
  }
};

SyntheticSpec spec() {
  SyntheticSpec s;
  s.kind = ActivationKind::kOutliers;
  s.seed = 5;
  s.num_heads = 64;
  return s;
}

std::shared_ptr<const ActivationSource> rounded_queries() {
  InputRounding r;
  r.query_input = true;
  return rounded_inputs(std::make_shared<SyntheticActivations>(spec()), r);
}

SweepConfig sweep_config() {
  SweepConfig c;
  c.recipes = {ref::preset("sglang-v4-fp8"), ref::preset("dsv32-ref"), ref::preset("sglang-v4-bf16"),
               ref::preset("sglang-v4-fp4")};
  c.contexts = {1500, 5000};
  c.seeds = {1};
  c.queries = 8;
  c.topk = 256;
  c.activations = spec();
  c.source = rounded_queries();
  c.threads = 4;
  return c;
}

TEST_F(StudyDeviceGpu, ExactOrderKernelsGiveTheCpuSweep) {
  const SweepConfig cpu = sweep_config();
  SweepConfig gpu = cpu;
  const auto kernel = dev::open_kernel("builtin");
  kernel->set_warm_timing(true);
  gpu.device.kernel = kernel.get();
  gpu.device.fallback = kernel.get();
  gpu.device.check_rows = 8;
  gpu.device.check_keys = 5000;
  StudyTimings timings;
  gpu.device.timings = &timings;
  nlohmann::json a = sweep_to_json(run_sweep(cpu, {}), ""), b = sweep_to_json(run_sweep(gpu, {}), "");
  EXPECT_GT(timings.stages.at("topk [builtin]").device_ms, 0.0);
  EXPECT_GT(timings.stages.at("topk [builtin]").host_ms, 0.0);
  ASSERT_TRUE(b.contains("device"));
  b.erase("device");
  EXPECT_EQ(a.dump(), b.dump());
}

TEST_F(StudyDeviceGpu, ExactOrderKernelsGiveTheCpuNeedle) {
  NeedleConfig cpu;
  cpu.recipes = {ref::preset("sglang-v4-fp8"), ref::preset("sglang-v4-bf16"), ref::preset("dsv32-ref")};
  cpu.contexts = {3000};
  cpu.depths = {0.1, 0.6, 0.999};  // 0.999: the context's last page, 56 of its 64 tokens
  cpu.margins = {0.0, 0.5, 1.5};
  cpu.topk = 128;
  cpu.reference_context = 1000;
  cpu.activations = spec();
  cpu.source = rounded_queries();
  cpu.threads = 4;
  NeedleConfig gpu = cpu;
  const auto kernel = dev::open_kernel("builtin");
  kernel->set_warm_timing(true);
  gpu.device.kernel = kernel.get();
  gpu.device.fallback = kernel.get();
  gpu.device.check_rows = 6;
  StudyTimings timings;
  gpu.device.timings = &timings;
  nlohmann::json a = needle_to_json(run_needle(cpu, {}), ""), b = needle_to_json(run_needle(gpu, {}), "");
  b.erase("device");
  EXPECT_EQ(a.dump(), b.dump());
}

TEST_F(StudyDeviceGpu, TensorCoreLogitsStayInsideTheirBoundAndFp4FallsBack) {
  SweepConfig c = sweep_config();
  const auto fast = dev::open_kernel("builtin-fast");
  const auto ours = dev::open_kernel("builtin");
  c.device.kernel = fast.get();
  c.device.fallback = ours.get();
  c.device.check_rows = 8;
  StudyTimings timings;
  c.device.timings = &timings;
  const SweepResult r = run_sweep(c, {});  // a score past its bound throws kMismatch
  const nlohmann::json& stages = r.layout.device.at("stages");
  EXPECT_EQ(stages.at("sglang-v4-fp8").at("logits_contract"), "bounded");
  EXPECT_EQ(stages.at("sglang-v4-bf16").at("logits_contract"), "bounded");
  EXPECT_EQ(stages.at("sglang-v4-fp4").at("logits"), "builtin");
  EXPECT_EQ(stages.at("sglang-v4-fp4").at("logits_contract"), "exact-order");
  for (const SweepRow& row : r.rows) EXPECT_GT(row.metrics.recall.mean, 0.5) << row.recipe << " " << row.context;
  EXPECT_GT(timings.stages.at("logits [builtin-fast]").device_ms, 0.0);
  EXPECT_EQ(timings.stages.at("keys [builtin-fast]").calls, 8);
}

// A batch for the study's logits call: 12 rows of sequence 0 (a study's queries), then 4
// rows of sequences 1..4 (a needle's cases); the reference's caches and queries.
dev::HostLogitsBatch study_rows_batch(const ref::Recipe& recipe, uint64_t seed) {
  constexpr int kHeads = 64, kSeqs = 5, kPage = 64;
  constexpr int64_t kLen = 700;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const ref::RopeTable rope(recipe.rope.table, kLen);
  const std::vector<float> nw(ref::kHeadDim, 1.0f), nb(ref::kHeadDim, 0.0f);
  const ref::NormParams norm{nw.data(), nb.data()};
  const ref::PagedCacheLayout layout(recipe.key_quant.format, kPage);
  dev::HostLogitsBatch b;
  b.q_format = recipe.query_quant.format;
  b.k_format = recipe.key_quant.format;
  b.accum = recipe.score;
  b.num_heads = kHeads;
  b.page_size = kPage;
  b.page_table_stride = (kLen + kPage - 1) / kPage;
  b.max_context = kLen + 5;
  const int64_t pages = b.page_table_stride * kSeqs;
  for (int64_t p = 0; p < pages; ++p) b.page_tables.push_back(static_cast<int32_t>(pages - 1 - p));
  b.cache.assign(pages * layout.page_bytes(), 0);
  std::vector<float> in(static_cast<size_t>(kHeads) * ref::kHeadDim), wproj(kHeads);
  for (int s = 0; s < kSeqs; ++s) {
    const std::vector<int32_t> table(b.page_tables.begin() + s * b.page_table_stride,
                                     b.page_tables.begin() + (s + 1) * b.page_table_stride);
    for (int64_t p = 0; p < kLen; ++p) {
      for (int i = 0; i < ref::kHeadDim; ++i) in[i] = normal(rng);
      layout.store(b.cache, layout.locate(table, p, pages),
                   ref::run_key_path(recipe, in.data(), static_cast<int>(p), norm, rope));
    }
  }
  for (int r = 0; r < 16; ++r) {
    b.row_seq.push_back(r < 12 ? 0 : r - 11);
    b.row_valid.push_back(static_cast<int32_t>(kLen - 40 * (r % 7)));
    for (float& v : in) v = normal(rng);
    for (float& w : wproj) w = normal(rng);
    const ref::QueryOutput q = ref::run_query_path(recipe, in.data(), kHeads, wproj.data(), b.row_valid.back() - 1, rope);
    for (int h = 0; h < kHeads; ++h) {
      b.q_values.insert(b.q_values.end(), q.heads[h].value_bytes.begin(), q.heads[h].value_bytes.end());
      b.q_scales.insert(b.q_scales.end(), q.heads[h].scale_bytes.begin(), q.heads[h].scale_bytes.end());
      b.weights.push_back(static_cast<float>(q.weights[h]));
    }
  }
  return b;
}

// The study passes its row-run hint (HostLogitsBatch::shared_row_run), which our kernels
// take natively; verify passes none, and our kernels go through the ABI, routed on the
// device. Four rows a block and one are the same sums, so every hint gives the same bytes.
TEST_F(StudyDeviceGpu, AHintedLogitsCallGivesTheRoutedOnesBytes) {
  const auto fast = dev::open_kernel("builtin-fast");
  for (const char* name : {"sglang-v4-fp8", "sglang-v4-bf16", "dsv32-ref"}) {
    dev::HostLogitsBatch b = study_rows_batch(ref::preset(name), 11);
    ASSERT_EQ(dev::shared_row_run_of(b.row_seq.data(), static_cast<int>(b.row_seq.size())), 4);
    b.shared_row_run = 0;
    const std::vector<float> routed = fast->paged_logits(b);
    for (const int hint : {4, 1}) {
      b.shared_row_run = hint;
      const std::vector<float> hinted = fast->paged_logits(b);
      ASSERT_EQ(hinted.size(), routed.size());
      EXPECT_EQ(std::memcmp(hinted.data(), routed.data(), routed.size() * sizeof(float)), 0) << name << ", hint " << hint;
    }
    // A finite score in every valid key: the rows were scored, not left as the buffer's zeros.
    for (size_t r = 0; r < b.row_seq.size(); ++r) {
      for (int64_t s = 0; s < b.row_valid[r]; ++s) {
        const float v = routed[r * b.max_context + s];
        ASSERT_TRUE(std::isfinite(v) && v != 0.0f) << name << " row " << r << " key " << s << ": " << v;
      }
    }
  }
}

// The needle's logits: the context's row once and each case's page alone, spliced
// (DeviceSequence::logits). Under the bounded contract too, every case's row is the bytes
// of a call over the case's whole page table (the same call before the splice), its
// needle's page the context's last, partial one among them.
TEST_F(StudyDeviceGpu, ANeedlesSplicedRowsAreTheWholeTablesBytes) {
  const auto fast = dev::open_kernel("builtin-fast");
  const auto acts = rounded_queries();
  StudyDevice device;
  device.kernel = fast.get();
  device.fallback = fast.get();
  constexpr int64_t kContext = 3000;
  for (const char* name : {"sglang-v4-fp8", "sglang-v4-bf16", "dsv32-ref"}) {
    const ref::Recipe& recipe = ref::preset(name);
    const ref::RopeTable rope(recipe.rope.table, kContext);
    const StageKernels kernels = stage_kernels(device, recipe, 128, kContext, kNeedlePageSize);
    const DeviceSequence sequence(kernels, recipe, *acts, kContext, kNeedlePageSize, rope, nullptr,
                                  DeviceSequence::ContextStore::kWithPlants);
    const std::vector<int64_t> positions = {5, 1500, 1530, 2999};
    std::vector<float> needles(positions.size() * ref::kHeadDim);
    acts->key_input(77, needles.data());
    for (size_t c = 1; c < positions.size(); ++c) acts->key_input(900 + c, needles.data() + c * ref::kHeadDim);
    const DeviceSequence::PlantedKeys planted = sequence.plant_keys(positions, needles.data());
    const dev::HostQueryResult q = sequence.queries({kContext - 1}, {kContext - 1});
    const std::vector<float> spliced = sequence.logits(planted, q);
    // The whole tables, as one call.
    dev::HostLogitsBatch b;
    b.q_format = recipe.query_quant.format;
    b.k_format = recipe.key_quant.format;
    b.accum = recipe.score;
    b.num_heads = acts->num_heads();
    b.cache = planted.cache;
    b.page_size = kNeedlePageSize;
    b.page_tables = planted.page_tables;
    b.page_table_stride = sequence.pages();
    b.max_context = kContext;
    for (int64_t c = 0; c < planted.cases; ++c) {
      b.q_values.insert(b.q_values.end(), q.values.begin(), q.values.end());
      b.q_scales.insert(b.q_scales.end(), q.scales.begin(), q.scales.end());
      b.weights.insert(b.weights.end(), q.weights.begin(), q.weights.end());
      b.row_seq.push_back(static_cast<int32_t>(c));
      b.row_valid.push_back(static_cast<int32_t>(kContext));
    }
    const std::vector<float> whole = fast->paged_logits(b);
    ASSERT_EQ(spliced.size(), whole.size());
    EXPECT_EQ(std::memcmp(spliced.data(), whole.data(), whole.size() * sizeof(float)), 0) << name;
    // The splice took each needle's own score: it differs from the context's at its slot.
    for (int64_t c = 0; c < planted.cases; ++c) {
      const float* row = spliced.data() + c * kContext;
      EXPECT_NE(row[positions[c]], spliced[((c + 1) % planted.cases) * kContext + positions[c]]) << name << " case " << c;
    }
  }
}

// The study passes its batch's repeat count (HostKeyBatch::repeated_positions), on which our
// kernels walk a batch that repeats few positions in batch order; verify passes none, and
// the ABI's hand-out walk runs. No walk changes a byte.
TEST_F(StudyDeviceGpu, AKeyStoreCallWithItsRepeatCountGivesTheAbiCallsBytes) {
  const auto ours = dev::open_kernel("builtin");
  const auto batch_order = dev::open_kernel("builtin:batch-order");  // a named walk: no switch
  const auto acts = rounded_queries();
  constexpr int kPage = 64;
  for (const char* name : {"sglang-v4-fp8", "sglang-v4-bf16", "dsv32-ref"}) {
    const ref::Recipe& recipe = ref::preset(name);
    for (const int copies : {1, 8}) {  // every position once (batch order), or 8 times (the ABI's walk)
      constexpr int kLen = 2000;
      const ref::RopeTable rope(recipe.rope.table, kLen);
      dev::HostKeyBatch b;
      b.bf16 = false;
      b.page_size = kPage;
      b.page_table_stride = (kLen + kPage - 1) / kPage;
      for (int s = 0; s < copies; ++s) {
        for (int64_t p = 0; p < b.page_table_stride; ++p) b.page_tables.push_back(static_cast<int32_t>(s * b.page_table_stride + p));
        for (int t = 0; t < kLen; ++t) {
          b.positions.push_back(t);
          b.seq.push_back(s);
          std::vector<float> in(ref::kHeadDim);
          acts->key_input(s * kLen + t, in.data());
          b.input_f32.insert(b.input_f32.end(), in.begin(), in.end());
        }
      }
      b.rope_cos.assign(rope.cos(0), rope.cos(0) + kLen * 32);
      b.rope_sin.assign(rope.sin(0), rope.sin(0) + kLen * 32);
      if (acts->norm_weight() != nullptr) b.norm_weight.assign(acts->norm_weight(), acts->norm_weight() + ref::kHeadDim);
      if (acts->norm_bias() != nullptr) b.norm_bias.assign(acts->norm_bias(), acts->norm_bias() + ref::kHeadDim);
      b.recipe = recipe;
      const ref::PagedCacheLayout layout(recipe.key_quant.format, kPage);
      b.cache.assign(copies * b.page_table_stride * layout.page_bytes(), 0);
      b.repeated_positions = -1;
      const std::vector<uint8_t> abi = ours->key_store(b);
      b.repeated_positions = dev::repeated_positions_of(b.positions);
      EXPECT_EQ(b.repeated_positions, int64_t{copies - 1} * kLen);
      const std::vector<uint8_t> hinted = ours->key_store(b);
      EXPECT_EQ(hinted, abi) << name << ", " << copies << " copies";
      EXPECT_EQ(batch_order->key_store(b), abi) << name << ", " << copies << " copies";
      EXPECT_NE(std::count(abi.begin(), abi.end(), uint8_t{0}), static_cast<std::ptrdiff_t>(abi.size())) << name;
    }
  }
}

// Our top-K checks its rows' statuses after the timed call (run_topk), not inside it; a
// NaN score is still the caller's bad input, named by its row.
TEST_F(StudyDeviceGpu, OurTopKStillNamesTheRowWithANaNScore) {
  const auto ours = dev::open_kernel("builtin");
  dev::HostTopKBatch b;
  b.row_stride = 70000;
  b.k = 64;
  b.valid_lengths = {70000, 70000, 70000};
  b.scores.resize(3 * 70000);
  for (size_t i = 0; i < b.scores.size(); ++i) b.scores[i] = static_cast<float>((i * 7919) % 10007);
  EXPECT_EQ(ours->topk(b).size(), 3u * 64);
  b.scores[70000 + 123] = std::nanf("");
  try {
    ours->topk(b);
    ADD_FAILURE() << "no error for a NaN score";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("row 1 has a NaN score"), std::string::npos) << e.what();
  }
}

using testing_cli::CliRun;

CliRun run(const std::string& args) { return testing_cli::run_shell(std::string(DSAF_CLI_PATH) + " " + args + " 2>&1"); }

const char* kSmallSweep = "sweep --recipes sglang-v4-fp8 --context 2k --queries 4 --topk 128 --heads 16 --device gpu";

TEST_F(StudyDeviceGpu, AGalleryBugStopsTheStudyWhereTheReferenceDisagrees) {
  const CliRun r = run(std::string(kSmallSweep) + " --kernel " + DSAF_GALLERY_ROPE_PAIRING);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("sweep --device gpu, context 2048, seed "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the key cache's value bytes of position"), std::string::npos) << r.out;
}

TEST_F(StudyDeviceGpu, WithoutRechecksAGalleryBugRunsToItsRecallCost) {
  const CliRun ok = run(std::string(kSmallSweep) + " --kernel builtin");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("device time per stage"), std::string::npos) << ok.out;
  const CliRun bug =
      run(std::string(kSmallSweep) + " --kernel " + DSAF_GALLERY_ROPE_PAIRING + " --check-rows 0 --check-keys 0");
  EXPECT_EQ(bug.exit_code, 0) << bug.out;
  EXPECT_NE(bug.out.find("keys gallery-rope-pairing, queries gallery-rope-pairing"), std::string::npos) << bug.out;
  EXPECT_NE(ok.out, bug.out);
}

}  // namespace
}  // namespace dsaf::oracle
