// File: table_plugin.cc
// A plug-in whose version-2 table is written from $DSAF_TEST_TABLE ("field=value,...",
// values as strtoll reads them: 5, -1, 0x41): the checks `verify --kernel` makes of a
// table when it opens it (device/kernel_under_test.cu check_table), which run before a GPU
// is asked for, so on any machine. Its entry points fail when called: it is no kernel.
// Three more knobs misbehave the way a broken plug-in can while it loads, which the CLI
// must survive (cli/kernel_open.h): abort_on_load=1 aborts in a static constructor,
// crash_in_get=1 dereferences a null pointer in dsaf_kernel_get, hang_in_get=1 never
// returns from it.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "device/kernel_abi.h"

namespace {

bool knob(const char* name) {
  const char* table = std::getenv("DSAF_TEST_TABLE");
  return table != nullptr && std::strstr(table, name) != nullptr;
}

__attribute__((constructor)) void on_load() {
  if (knob("abort_on_load=1")) std::abort();
}

const char* last_error() { return "table_plugin: a table for verify's checks, not a kernel"; }
int key_store(const dsaf_key_store_args_v2*) { return 1; }
int topk(const dsaf_topk_args_v1*) { return 1; }

// The table's valid defaults (an fp8 key store of 64-token pages and an ordered top-K),
// then each "field=value" of the environment.
dsaf_kernel_v2 table_from_environment() {
  dsaf_kernel_v2 t{};
  t.abi_version = DSAF_KERNEL_ABI_VERSION_2;
  t.name = "table_plugin";
  t.key_caps.store_formats = 1u << 3;
  t.key_caps.page_sizes = 1u << 6;
  t.key_caps.input_dtypes = DSAF_INPUT_BF16;
  t.key_store = key_store;
  t.topk = topk;
  t.last_error = last_error;
  const char* text = std::getenv("DSAF_TEST_TABLE");
  std::string fields = text ? text : "";
  size_t begin = 0;
  while (begin < fields.size()) {
    const size_t end = std::min(fields.find(',', begin), fields.size());
    const std::string item = fields.substr(begin, end - begin);
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const long long v = eq == std::string::npos ? 0 : std::strtoll(item.c_str() + eq + 1, nullptr, 0);
    if (name == "store_formats") t.key_caps.store_formats = static_cast<uint32_t>(v);
    if (name == "page_sizes") t.key_caps.page_sizes = static_cast<uint32_t>(v);
    if (name == "input_dtypes") t.key_caps.input_dtypes = static_cast<uint32_t>(v);
    if (name == "norm_params_bf16") t.key_caps.norm_params_bf16 = static_cast<int32_t>(v);
    if (name == "max_position") t.key_caps.max_position = v;
    if (name == "max_tokens") t.key_caps.max_tokens = v;
    if (name == "logits_contract") t.logits_contract = static_cast<int32_t>(v);
    if (name == "topk_contract") t.topk_contract = static_cast<int32_t>(v);
    if (name == "topk_padding") t.topk_padding = static_cast<int32_t>(v);
    if (name == "topk_k") t.topk_k = static_cast<int32_t>(v);
    begin = end + 1;
  }
  return t;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const dsaf_kernel_v2* dsaf_kernel_get(uint32_t abi_version) {
  if (knob("crash_in_get=1")) {
    volatile int* nowhere = nullptr;
    *nowhere = 1;
  }
  while (knob("hang_in_get=1")) sleep(1);
  static const dsaf_kernel_v2 table = table_from_environment();
  return abi_version == DSAF_KERNEL_ABI_VERSION_2 ? &table : nullptr;
}
