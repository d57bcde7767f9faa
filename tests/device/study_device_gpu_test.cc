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
  cpu.depths = {0.1, 0.6};
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
