// `sweep --shard i/n`, `needle --shard i/n` and `merge` through the binary
// (docs/sharding.md): the merged files are the unsharded run's, byte for byte, whatever
// the shard count and the order the files are given in; merge refuses shard files that do
// not make one study.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_run.h"

namespace {

using dsaf::testing_cli::CliRun;
using dsaf::testing_cli::run_shell;

// stdout and stderr together.
CliRun run(const std::string& args) { return run_shell(std::string(DSAF_CLI_PATH) + " " + args + " 2>&1"); }

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fresh, empty folder under the test's temp dir.
std::string fresh_dir(const std::string& name) {
  const std::string dir = testing::TempDir() + "dsaf_shard_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string shard_file(const std::string& dir, const std::string& study, int index, int count) {
  return dir + "/" + study + ".shard-" + std::to_string(index) + "-of-" + std::to_string(count) + ".json";
}

// Runs `study_args --out dir` whole, as 1 shard and as 3 shards (into the same folder, so
// that every run names the same command), merges the shards in shard order and in another
// order, and expects every merged file to equal the whole run's.
void expect_shards_merge_to_whole_run(const std::string& study, const std::string& study_args) {
  const std::string dir = fresh_dir(study);
  const std::string args = study + " " + study_args + " --out " + dir;
  CliRun r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<std::string> names = {study + ".json", study + ".csv"};
  for (const int count : {1, 3}) {
    for (int i = 0; i < count; ++i) {
      r = run(args + " --shard " + std::to_string(i) + "/" + std::to_string(count));
      ASSERT_EQ(r.exit_code, 0) << r.out;
    }
  }
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"one", shard_file(dir, study, 0, 1)},
      {"three", shard_file(dir, study, 0, 3) + " " + shard_file(dir, study, 1, 3) + " " + shard_file(dir, study, 2, 3)},
      {"three_reordered",
       shard_file(dir, study, 2, 3) + " " + shard_file(dir, study, 0, 3) + " " + shard_file(dir, study, 1, 3)},
  };
  for (const auto& [label, files] : merges) {
    const std::string out = dir + "/merged_" + label;
    r = run("merge --out " + out + " " + files);
    ASSERT_EQ(r.exit_code, 0) << label << ": " << r.out;
    for (const std::string& name : names) {
      const std::string whole = bytes_of(dir + "/" + name);
      ASSERT_FALSE(whole.empty()) << name;
      EXPECT_TRUE(bytes_of(out + "/" + name) == whole) << label << ": " << name << " differs from the whole run's";
    }
  }
  // Each of the 3 shards ran part of the study, not all of it (else the test shows nothing).
  for (int i = 0; i < 3; ++i) {
    const nlohmann::json shard = nlohmann::json::parse(bytes_of(shard_file(dir, study, i, 3)));
    EXPECT_GT(shard["units"].size(), 0u) << i;
    EXPECT_LT(shard["units"].size(), nlohmann::json::parse(bytes_of(shard_file(dir, study, 0, 1)))["units"].size());
  }
}

TEST(CliShard, SweepShardsMergeToTheWholeRunsBytes) {
  // 2 contexts x 2 seeds = 4 units; attribution adds variants to every unit.
  expect_shards_merge_to_whole_run("sweep",
                                   "--recipes dsv32-ref,exact --context 128,256 --seeds 2 --queries 3 --topk 8 "
                                   "--heads 2 --attribution --threads 1");
}

TEST(CliShard, NeedleShardsMergeToTheWholeRunsBytes) {
  // 2 contexts x 2 trials = 4 units.
  expect_shards_merge_to_whole_run("needle",
                                   "--recipes dsv32-ref,exact --context 128,256 --trials 2 --depths 0.3,0.8 "
                                   "--margins 0,0.5 --topk 8 --heads 2 --threads 1");
}

// Exit code 2 and one line naming the problem.
void expect_refused(const std::string& args, const std::string& why) {
  const CliRun r = run(args);
  EXPECT_EQ(r.exit_code, 2) << args << " -> " << r.out;
  EXPECT_NE(r.out.find(why), std::string::npos) << args << " -> " << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << " -> " << r.out;
}

TEST(CliShard, MalformedOrOutOfRangeShardIsAUsageError) {
  const std::string study = "sweep --recipes exact --context 128 --queries 2 --topk 8 --heads 2 --out " +
                            fresh_dir("usage");
  expect_refused(study + " --shard 3/3", "--shard '3/3': the index must be below the count");
  expect_refused(study + " --shard x", "--shard 'x' is not INDEX/COUNT");
  expect_refused(study + " --shard 1/0", "--shard '1/0': the count must be >= 1");
  expect_refused(study + " --shard -1/2", "is not INDEX/COUNT");
  expect_refused(study + " --shard 0/2/3", "is not INDEX/COUNT");
  expect_refused(study + " --shard ''", "--shard: the value is empty");
  expect_refused("needle --recipes exact --context 128 --topk 8 --shard 3/3", "the index must be below the count");
  expect_refused("needle --recipes exact --context 128 --topk 8 --shard 0/2", "--shard needs --out");
}

TEST(CliShard, MergeRefusesFilesThatAreNotOneCompleteStudy) {
  const std::string dir = fresh_dir("refusals");
  const std::string sweep = "sweep --recipes exact --context 128,256 --queries 2 --topk 8 --heads 2 --out " + dir;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(run(sweep + " --shard " + std::to_string(i) + "/3").exit_code, 0);
  const std::string s0 = shard_file(dir, "sweep", 0, 3), s1 = shard_file(dir, "sweep", 1, 3),
                    s2 = shard_file(dir, "sweep", 2, 3);
  const std::string out = " --out " + dir + "/merged ";
  expect_refused("merge" + out + s0 + " " + s2, "shard(s) 1 of 3 missing");
  expect_refused("merge" + out + s0 + " " + s1 + " " + s1 + " " + s2, "are both shard 1 of 3");

  // Another study's shard: a different K.
  const std::string other_dir = fresh_dir("refusals_other");
  ASSERT_EQ(run("sweep --recipes exact --context 128,256 --queries 2 --topk 4 --heads 2 --out " + other_dir +
                " --shard 1/3")
                .exit_code,
            0);
  expect_refused("merge" + out + s0 + " " + shard_file(other_dir, "sweep", 1, 3) + " " + s2, "differ in config.topk (8 vs 4)");

  // Another shard count.
  ASSERT_EQ(run(sweep + " --shard 1/2").exit_code, 0);
  expect_refused("merge" + out + s0 + " " + shard_file(dir, "sweep", 1, 2) + " " + s2, "is shard 1 of 2");

  // Another build: the same shard as another commit would record it.
  nlohmann::json edited = nlohmann::json::parse(bytes_of(s1));
  edited["tool"]["commit"] = "0123456789ab";
  const std::string other_build = dir + "/other_build.json";
  std::ofstream(other_build) << edited.dump();
  expect_refused("merge" + out + s0 + " " + other_build + " " + s2, "differ in tool.commit");

  // Units the plan gives another shard.
  edited = nlohmann::json::parse(bytes_of(s1));
  edited["units"] = nlohmann::json::parse(bytes_of(s0))["units"];
  const std::string wrong_units = dir + "/wrong_units.json";
  std::ofstream(wrong_units) << edited.dump();
  expect_refused("merge" + out + s0 + " " + wrong_units + " " + s2, "is not one the plan gives shard 1 of 3");

  // Not shard files, or shards of two studies.
  const std::string needle_dir = fresh_dir("refusals_needle");
  ASSERT_EQ(run("needle --recipes exact --context 128 --topk 8 --heads 2 --trials 1 --depths 0.5 --margins 0.5 "
                "--out " + needle_dir + " --shard 0/1")
                .exit_code,
            0);
  expect_refused("merge" + out + s0 + " " + shard_file(needle_dir, "needle", 0, 1), "merge one study at a time");
  ASSERT_EQ(run(sweep).exit_code, 0);
  expect_refused("merge" + out + dir + "/sweep.json", "is not a shard file");
  expect_refused("merge" + out + dir + "/no_such_file.json", "cannot open");
  EXPECT_FALSE(std::filesystem::exists(dir + "/merged"));  // nothing written by a refused merge
}

}  // namespace
