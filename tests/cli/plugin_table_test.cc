// `verify --kernel lib.so` checks the plug-in's version-2 table when it opens it, before a
// GPU is asked for: a declaration outside what its field defines exits 2 with one line
// naming the field and the value (docs/verify.md), on any machine; a plug-in that crashes
// or hangs while loading is reported the same way (cli/kernel_open.h). The plug-in
// (table_plugin.cc) takes its table and its misbehaviour from $DSAF_TEST_TABLE.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cli/cli_run.h"

#if defined(DSAF_TABLE_PLUGIN)
namespace {

dsaf::testing_cli::CliRun verify_with_table(const std::string& table, const std::string& environment = "") {
  return dsaf::testing_cli::run_shell(environment + "DSAF_TEST_TABLE='" + table + "' " + DSAF_CLI_PATH +
                                      " verify --recipe sglang-v4-fp8 --cases 1 --kernel " + DSAF_TABLE_PLUGIN +
                                      " 2>&1");
}

TEST(CliPluginTable, EveryUndefinedDeclarationExitsTwoNamingItsField) {
  struct Case {
    std::string table, field_and_value;
  };
  const std::vector<Case> cases = {
      {"store_formats=0x41", "key_caps.store_formats is 0x41"},  // bit 0 (no store) and bit 6 (no format)
      {"store_formats=0x80000008", "key_caps.store_formats is 0x80000008"},
      {"page_sizes=0x240", "key_caps.page_sizes is 0x240"},  // pages of 512 tokens
      {"input_dtypes=5", "key_caps.input_dtypes is 0x5"},
      {"norm_params_bf16=7", "key_caps.norm_params_bf16 is 7"},
      {"max_position=-1", "key_caps.max_position is -1"},
      // max_position + 1 would overflow int64 where verify bounds its sequences
      {"max_position=0x7fffffffffffffff", "key_caps.max_position is 9223372036854775807"},
      {"max_position=0x80000000", "key_caps.max_position is 2147483648"},
      {"max_tokens=-5", "key_caps.max_tokens is -5"},
      {"logits_contract=2", "logits_contract is 2"},
      {"topk_contract=3", "topk_contract is 3"},
      {"topk_contract=-1", "topk_contract is -1"},
      {"topk_padding=2", "topk_padding is 2"},
      {"topk_k=2049", "topk_k is 2049"},
      {"topk_k=-4", "topk_k is -4"},
  };
  for (const Case& c : cases) {
    const dsaf::testing_cli::CliRun r = verify_with_table(c.table);
    EXPECT_EQ(r.exit_code, 2) << c.table << ": " << r.out;
    EXPECT_NE(r.out.find("dsaf_kernel_v2." + c.field_and_value), std::string::npos) << c.table << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << c.table << ": " << r.out;
  }
}

TEST(CliPluginTable, TheValidTablesLimitsPassItsChecks) {
  // The defaults and each field at the edge of what it defines: no table complaint (on a
  // machine without a GPU verify then stops for the GPU; with one, at the stub's failure).
  for (const std::string table :
       {"", "store_formats=0x3e,page_sizes=0x1ff,input_dtypes=3,norm_params_bf16=1",
        "max_position=2147483647,max_tokens=0x7fffffffffffffff,logits_contract=1",
        "topk_contract=2,topk_padding=1,topk_k=2048", "topk_k=0,max_position=0"}) {
    const dsaf::testing_cli::CliRun r = verify_with_table(table);
    EXPECT_EQ(r.out.find("dsaf_kernel_v2."), std::string::npos) << table << ": " << r.out;
    EXPECT_EQ(r.exit_code, 2) << table << ": " << r.out;
  }
}

TEST(CliPluginTable, APlugInThatCrashesOrHangsWhileLoadingExitsTwoNamingIt) {
  // Loaded in a child first: the CLI reports it, one line, exit 2 (a crash used to end the
  // CLI with the plug-in's signal).
  struct Case {
    std::string table, expected;
  };
  const std::vector<Case> cases = {
      {"abort_on_load=1", "crashed while loading (signal 6"},
#if defined(__SANITIZE_ADDRESS__)
      // AddressSanitizer's SEGV handler (in the child too) prints its report and exits 1.
      {"crash_in_get=1", "failed while loading"},
#else
      {"crash_in_get=1", "crashed while loading (signal 11"},
#endif
      {"hang_in_get=1", "did not finish within 2 s"},
  };
  for (const Case& c : cases) {
    const dsaf::testing_cli::CliRun r = verify_with_table(c.table, "DSAF_PLUGIN_TIMEOUT_S=2 ");
    EXPECT_EQ(r.exit_code, 2) << c.table << ": " << r.out;
    EXPECT_NE(r.out.find(c.expected), std::string::npos) << c.table << ": " << r.out;
    EXPECT_NE(r.out.find(DSAF_TABLE_PLUGIN), std::string::npos) << c.table << ": " << r.out;
#if !defined(__SANITIZE_ADDRESS__)  // the child's report shares stderr
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << c.table << ": " << r.out;
#endif
  }
}

}  // namespace
#endif
