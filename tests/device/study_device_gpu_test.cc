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
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "device/api.h"
#include "oracle/needle.h"
#include "oracle/results_io.h"
#include "oracle/study_device.h"
#include "oracle/sweep.h"
#include "oracle/synthetic.h"
#include "reference/error.h"
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
