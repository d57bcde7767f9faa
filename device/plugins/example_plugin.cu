// File: example_plugin.cu — a plug-in built from our kernels (kernel_abi.h). Compiled
// three times (device/CMakeLists.txt) with DSAF_PLUGIN_BUG = 0 (correct), 1 (queries
// multiplied by the scale's reciprocal where the recipe divides, divided where it
// multiplies) or 2 (keys written one slot late), so
// `verify` can be shown to pass the first and catch and name the other two.
#include "device/plugins/abi_kernels.cuh"

#ifndef DSAF_PLUGIN_BUG
#error "DSAF_PLUGIN_BUG must be 0, 1 or 2"
#endif

namespace {
constexpr dsaf::dev::PluginBug kBug = static_cast<dsaf::dev::PluginBug>(DSAF_PLUGIN_BUG);
constexpr const char* kNames[] = {"example (our kernels)", "example-wrong-reciprocal",
                                  "example-wrong-page-offset"};
}  // namespace

extern "C" __attribute__((visibility("default"))) const dsaf_kernel_v1* dsaf_kernel_get(uint32_t abi_version) {
  if (abi_version != DSAF_KERNEL_ABI_VERSION) return nullptr;
  return dsaf::dev::abi_table<kBug>(kNames[DSAF_PLUGIN_BUG]);
}

// Scoring and selection: our exact-order logits and top-K (no deliberate bugs here).
extern "C" __attribute__((visibility("default"))) const dsaf_scoring_v1* dsaf_scoring_get(uint32_t abi_version) {
  if (abi_version != DSAF_SCORING_ABI_VERSION) return nullptr;
  return dsaf::dev::abi_scoring_table<false>(kNames[DSAF_PLUGIN_BUG]);
}
