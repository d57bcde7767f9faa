// `dsa-fidelity verify` on the example plug-ins (device/plugins): our kernels pass; the
// two deliberately wrong ones fail, and the report names the bug.
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

Result verify(const std::string& plugin, const std::string& recipe) {
  const std::string command = std::string(DSAF_CLI_PATH) + " verify --kernel " + plugin + " --recipe " + recipe +
                              " --cases 4000 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class VerifyPluginsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (dsaf::dev::query_gpu().device_count == 0) GTEST_SKIP() << "no GPU";
  }
};

TEST_F(VerifyPluginsGpu, OurKernelsAsAPluginPass) {
  for (const char* recipe : {"sglang-v4-fp8", "dsv32-ref", "sglang-v4-fp4", "dsv4-ref"}) {
    const Result r = verify(DSAF_PLUGIN_OK, recipe);
    EXPECT_EQ(r.exit_code, 0) << recipe << "\n" << r.out;
  }
}

TEST_F(VerifyPluginsGpu, ReciprocalBugIsCaughtAndNamed) {
  // sglang-v4-fp8 divides q by its plain amax/448 scale (docs/numerics.md §6.3).
  const Result r = verify(DSAF_PLUGIN_RECIPROCAL, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("query_quant.apply: \"divide\" -> \"times_reciprocal\""), std::string::npos) << r.out;
}

TEST_F(VerifyPluginsGpu, PageOffsetBugIsCaughtAndNamed) {
  const Result r = verify(DSAF_PLUGIN_OFFSET, "sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("1 slot(s) after the one its page table entry names"), std::string::npos) << r.out;
}

}  // namespace
