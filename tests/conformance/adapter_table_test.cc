// Every conformance adapter (conformance/) loads as `verify` loads a plug-in (dlopen with
// RTLD_NOW: an undefined symbol, e.g. a torch or tvm-ffi runtime call an upstream header
// pulled in, fails here rather than on the GPU host) and hands out a sane version-2
// table. No GPU needed: building the table touches no device.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "device/kernel_abi.h"

namespace {

std::vector<std::string> adapters() {
  std::vector<std::string> paths;
  std::stringstream list(DSAF_ADAPTER_PATHS);
  for (std::string path; std::getline(list, path, '|');) {
    if (!path.empty()) paths.push_back(path);
  }
  return paths;
}

TEST(ConformanceAdapters, EveryAdapterLoadsAndDeclaresWhatItRuns) {
  const std::vector<std::string> paths = adapters();
  ASSERT_FALSE(paths.empty());
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr) << dlerror();
    const auto get = reinterpret_cast<dsaf_kernel_get_v2_fn>(dlsym(lib, "dsaf_kernel_get"));
    ASSERT_NE(get, nullptr);
    EXPECT_EQ(get(DSAF_KERNEL_ABI_VERSION), nullptr) << "adapters speak version 2 only";
    const dsaf_kernel_v2* t = get(DSAF_KERNEL_ABI_VERSION_2);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->abi_version, DSAF_KERNEL_ABI_VERSION_2);
    ASSERT_NE(t->name, nullptr);
    // The name carries the upstream release it was built from (conformance/upstream.lock).
    EXPECT_NE(std::string(t->name).find(' '), std::string::npos) << t->name;
    EXPECT_NE(t->last_error, nullptr);
    EXPECT_TRUE(t->key_store != nullptr || t->query_quant != nullptr || t->paged_logits != nullptr ||
                t->topk != nullptr);
    if (t->key_store != nullptr) {
      EXPECT_NE(t->key_caps.store_formats, 0u);
      EXPECT_NE(t->key_caps.page_sizes & 0x1FFu, 0u);
      EXPECT_EQ(t->key_caps.page_sizes & ~0x1FFu, 0u);
      EXPECT_NE(t->key_caps.input_dtypes & (DSAF_INPUT_BF16 | DSAF_INPUT_FP32), 0u);
    }
    if (t->topk != nullptr) {
      EXPECT_TRUE(t->topk_contract == DSAF_TOPK_ORDERED || t->topk_contract == DSAF_TOPK_SET ||
                  t->topk_contract == DSAF_TOPK_SET_TIES);
      EXPECT_GE(t->topk_k, 0);
      EXPECT_LE(t->topk_k, 2048);
    }
  }
}

}  // namespace
