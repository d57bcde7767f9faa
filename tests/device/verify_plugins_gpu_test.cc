// `dsa-fidelity verify` on the plug-ins of device/plugins: the version-1 examples (our
// kernels pass; the two deliberately wrong ones fail, and the report names the bug), the
// version-2 contract plug-ins (a fixed page size and bf16 norm parameters pass inside
// what they declare, with the rest reported as not covered; top-K under each contract
// passes or fails with its difference classified) and the injected-bug gallery
// (docs/gallery.md: each bug fails its own stage, named, and only that stage).
#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include "device/api.h"

namespace {

struct Result {
  int exit_code;
  std::string out;
};

// The CLI with `args`: its exit code and its output (stdout and stderr).
Result run(const std::string& args) {
  FILE* pipe = popen((std::string(DSAF_CLI_PATH) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

Result verify(const std::string& plugin, const std::string& recipe, const std::string& extra = "") {
  return run("verify --kernel " + plugin + " --recipe " + recipe + " --cases 4000 " + extra);
}

class VerifyPluginsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (dsaf::dev::query_gpu().device_count == 0) GTEST_SKIP() << "no GPU";
  }
};

TEST_F(VerifyPluginsGpu, OurKernelsAsAPluginPass) {
  for (const char* recipe : {"sglang-v4-fp8", "dsv32-ref", "dsv4-ref"}) {
    const Result r = verify(DSAF_PLUGIN_OK, recipe);
    EXPECT_EQ(r.exit_code, 0) << recipe << "\n" << r.out;
  }
}

// sglang-v4-fp4 sets key_quant.fp4_zero_sign, which the version-1 recipe has no member
// for: a version-1 plug-in cannot be told it, and verify says so (bad input, exit 2).
TEST_F(VerifyPluginsGpu, AVersion1PluginCannotTakeAFieldAddedAfterIt) {
  const Result r = verify(DSAF_PLUGIN_OK, "sglang-v4-fp4");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("key_quant.fp4_zero_sign cannot travel through kernel ABI v1"), std::string::npos) << r.out;
}

TEST_F(VerifyPluginsGpu, ReciprocalBugIsCaughtAndNamed) {
  // sglang-v4-fp8 multiplies q by the reciprocal of its plain amax/448 scale (docs/numerics.md
  // §6.3); the plug-in divides by it, and sglang-v32-fused's divide (plain scale, not a power
  // of two) it turns into a multiply.
  Result r = verify(DSAF_PLUGIN_RECIPROCAL, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("query_quant.apply: \"times_reciprocal\" -> \"divide\""), std::string::npos) << r.out;
  r = verify(DSAF_PLUGIN_RECIPROCAL, "sglang-v32-fused");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("key cache: byte-exact"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("query_quant.apply: \"divide\" -> \"times_reciprocal\""), std::string::npos) << r.out;
}

TEST_F(VerifyPluginsGpu, PageOffsetBugIsCaughtAndNamed) {
  const Result r = verify(DSAF_PLUGIN_OFFSET, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("1 slot(s) after the one its page table entry names"), std::string::npos) << r.out;
}

TEST_F(VerifyPluginsGpu, AFixedPageSizeIsVerifiedAloneAndTheRestReported) {
  const Result r = verify(DSAF_PLUGIN_PAGE64, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("key cache: byte-exact on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(page sizes 64;"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not covered: page sizes 1,2,4,8,16,32,128,256 (not declared by the kernel)"), std::string::npos)
      << r.out;
}

TEST_F(VerifyPluginsGpu, Bf16NormParametersAreDrawnBf16Exact) {
  for (const char* recipe : {"dsv32-ref", "sglang-v4-bf16"}) {  // LayerNorm with a bias; RMSNorm
    const Result r = verify(DSAF_PLUGIN_BF16_NORM, recipe);
    EXPECT_EQ(r.exit_code, 0) << recipe << "\n" << r.out;
    EXPECT_NE(r.out.find("bf16-exact norm parameters"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("not covered: fp32 input (not declared)"), std::string::npos) << r.out;
  }
}

// The plug-in never writes q scales: for an fp8 query that is the scale folded into the
// head weight (SGLang's V4 query kernel), which verify reports and judges through the
// weights; fp4 block scales fold into nothing, so their absence is a mismatch.
TEST_F(VerifyPluginsGpu, UnwrittenQScalesPassOnlyWhereTheWeightsCarryThem) {
  Result r = verify(DSAF_PLUGIN_BF16_NORM, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("q scales: not written by the kernel"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("head weights: bit-exact"), std::string::npos) << r.out;
  r = verify(DSAF_PLUGIN_BF16_NORM, "sglang-v4-fp4");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("q scales: MISMATCH"), std::string::npos) << r.out;
}

TEST_F(VerifyPluginsGpu, AnUnorderedSetPassesItsContractAndIsOrderOnlyUnderOrdered) {
  Result r = verify(DSAF_PLUGIN_TOPK_SET, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("top-K (set contract): every one of"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("key cache: not provided by the kernel"), std::string::npos) << r.out;
  r = verify(DSAF_PLUGIN_TOPK_SET, "sglang-v4-fp8", "--topk-contract ordered");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("(order only)"), std::string::npos) << r.out;
}

// Our top-K by index (the knob): the reference's set in ascending positions, declared under
// the set contract; under the ordered contract every row differs in order only.
TEST_F(VerifyPluginsGpu, OurTopKByIndexIsTheSetAndDiffersInOrderOnly) {
  for (const char* kernel : {"builtin:by-index", "builtin-fast:by-index"}) {
    Result r = verify(kernel, "sglang-v4-fp8");
    EXPECT_EQ(r.exit_code, 0) << kernel << "\n" << r.out;
    EXPECT_NE(r.out.find("top-K (set contract): every one of"), std::string::npos) << kernel << "\n" << r.out;
    r = verify(kernel, "sglang-v4-fp8", "--topk-contract ordered");
    EXPECT_EQ(r.exit_code, 1) << kernel << "\n" << r.out;
    EXPECT_NE(r.out.find("(order only)"), std::string::npos) << kernel << "\n" << r.out;
  }
}

TEST_F(VerifyPluginsGpu, ATieSwapAtTheCutPassesSetTiesAndIsNamedUnderSet) {
  Result r = verify(DSAF_PLUGIN_TOPK_TIES, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("top-K (set-ties contract): every one of"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 0 with tie substitutions"), std::string::npos) << "no row had a tie swap:\n" << r.out;
  r = verify(DSAF_PLUGIN_TOPK_TIES, "sglang-v4-fp8", "--topk-contract set");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("tie substitution(s) at the cut"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("above the cut missing"), std::string::npos) << r.out;
}

TEST_F(VerifyPluginsGpu, AKeyDroppedAboveTheCutIsAMissWithItsRank) {
  const Result r = verify(DSAF_PLUGIN_TOPK_DROP, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("top-K (set contract): MISMATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("key(s) above the cut missing: index"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exact rank 1"), std::string::npos) << r.out;
}

// What verify saw, saved as a cache capture, compares the same way without the GPU: our
// kernels' batch passes, the page-offset bug's failing batch fails with its location.
TEST_F(VerifyPluginsGpu, ASavedCaptureComparesAsVerifyJudged) {
  const std::string good = ::testing::TempDir() + "dsaf_builtin_capture.h5";
  Result r = verify("builtin", "sglang-v4-fp4", "--save-capture " + good);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run("compare --capture " + good + " --recipe sglang-v4-fp4");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const std::string bad = ::testing::TempDir() + "dsaf_offset_capture.h5";
  r = verify(DSAF_PLUGIN_OFFSET, "sglang-v4-fp8", "--save-capture " + bad);
  ASSERT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("the first that failed"), std::string::npos) << r.out;
  r = run("compare --capture " + bad + " --recipe sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("First mismatch"), std::string::npos) << r.out;
}

// ---- The injected-bug gallery (device/plugins/gallery_plugins.cu, docs/gallery.md) ----
// Each plug-in has every stage of our kernels and one mistake; verify must fail the
// mistake's stage with the text below (docs/gallery.md quotes it) and pass the others.

bool has(const Result& r, const std::string& text) { return r.out.find(text) != std::string::npos; }

// verify on a plug-in with a key-path bug: exit 1, the key cache failing and every other
// stage passing. Returns the run for the bug's own lines.
Result expect_key_cache_fails(const std::string& plugin, const std::string& recipe) {
  const Result r = verify(plugin, recipe);
  EXPECT_EQ(r.exit_code, 1) << recipe << "\n" << r.out;
  EXPECT_TRUE(has(r, "key cache: MISMATCH in batch ")) << r.out;
  EXPECT_TRUE(has(r, "q codes: byte-exact")) << r.out;
  EXPECT_TRUE(has(r, "paged logits: bit-exact")) << r.out;
  EXPECT_TRUE(has(r, "top-K (ordered contract): every one of")) << r.out;
  return r;
}

// A key path departing from the recipe in `change`, the query path following it: the key
// cache is explained by the change, and the two paths are said to disagree.
void expect_key_path_alone_departs(const std::string& plugin, const std::string& recipe, const std::string& change) {
  const Result r = expect_key_cache_fails(plugin, recipe);
  EXPECT_TRUE(has(r, "explained by one recipe field: " + change + "\n")) << r.out;
  EXPECT_TRUE(has(r, "key and query paths disagree: the key cache follows " + change +
                         ", the query path follows the recipe"))
      << r.out;
}

TEST_F(VerifyPluginsGpu, GalleryRopePairingOnTheKeySideIsNamed) {
  expect_key_path_alone_departs(DSAF_GALLERY_ROPE_PAIRING, "dsv32-ref", "rope.pairing: \"neox\" -> \"interleaved\"");
}

TEST_F(VerifyPluginsGpu, GalleryHadamardOnTheQuerySideOnlyIsNamed) {
  expect_key_path_alone_departs(DSAF_GALLERY_HADAMARD_QUERY_ONLY, "sglang-v4-fp8", "hadamard: true -> false");
}

TEST_F(VerifyPluginsGpu, GalleryNanCodesAreCounted) {
  const Result r = expect_key_cache_fails(DSAF_GALLERY_NAN_CODES, "sglang-v4-fp8");
  EXPECT_TRUE(has(r, ", 0 in scales)")) << r.out;
  EXPECT_TRUE(has(r, "element(s) are NaN codes in the actual cache where the reference has a number")) << r.out;
  EXPECT_TRUE(has(r, "no single recipe field, slot shift or scale page shift explains it")) << r.out;
}

TEST_F(VerifyPluginsGpu, GalleryScaleOnTheNextPageIsLocated) {
  for (const char* recipe : {"sglang-v4-fp8", "sglang-v4-fp4"}) {  // an fp32 scale; four ue8m0 scales
    const Result r = expect_key_cache_fails(DSAF_GALLERY_SCALE_NEXT_PAGE, recipe);
    EXPECT_TRUE(has(r, " (0 in values, ")) << r.out;
    EXPECT_TRUE(has(r, "explained by the page layout: every key's values are in the slot its page table entry names "
                       "and its scale in the same slot of the next page of the cache (physical page + 1)"))
        << r.out;
  }
}

TEST_F(VerifyPluginsGpu, GalleryTopKCandidateCapIsAnIndexOrderLoss) {
  const Result r = verify(DSAF_GALLERY_TOPK_CAP, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "key cache: byte-exact on")) << r.out;
  EXPECT_TRUE(has(r, "q codes: byte-exact")) << r.out;
  EXPECT_TRUE(has(r, "paged logits: bit-exact")) << r.out;
  EXPECT_TRUE(has(r, "top-K (set contract): MISMATCH")) << r.out;
  EXPECT_TRUE(has(r, "key(s) above the cut missing: index")) << r.out;
  EXPECT_TRUE(has(r, "lost in index order, as past a full candidate buffer")) << r.out;
}

}  // namespace
