// The command line as a user meets it: exit codes and the JSON of `recipes`.
#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

struct CliRun {
  int exit_code;
  std::string out;
};

CliRun run(const std::string& args) {
  const std::string command = std::string(DSAF_CLI_PATH) + " " + args + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(CliRecipes, JsonListsAllNinePresetsWithTheirFields) {
  const CliRun r = run("recipes --json");
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 9u);
  for (const auto& recipe : j) {
    for (const char* field : {"name", "key_norm", "rope", "hadamard", "key_quant", "query_quant",
                              "score", "topk", "page_size", "source"}) {
      EXPECT_TRUE(recipe.contains(field)) << field;
    }
  }
  EXPECT_EQ(j[6]["name"], "sglang-v4-fp8");
  EXPECT_EQ(j[6]["key_norm"]["rsqrt"], "sm90_approx");
  EXPECT_EQ(j[8]["cache_bytes_per_token"], 68);
}

TEST(CliExitCodes, BadUsageAndBadInputExitTwo) {
  EXPECT_EQ(run("").exit_code, 2);
  EXPECT_EQ(run("no-such-command").exit_code, 2);
  EXPECT_EQ(run("recipes --file /nonexistent.json").exit_code, 2);
  const std::string path = testing::TempDir() + "bad_recipe.json";
  std::ofstream(path) << R"({"base": "exact", "name": "x", "bogus": 1})";
  EXPECT_EQ(run("recipes --file " + path).exit_code, 2);
  std::ofstream(path) << "{ not json";
  EXPECT_EQ(run("recipes --file " + path).exit_code, 2);
}

TEST(CliRecipes, LoadsAUserRecipeFile) {
  const std::string path = testing::TempDir() + "good_recipe.json";
  std::ofstream(path) << R"([{"base": "dsv32-ref", "name": "mine", "hadamard": false}])";
  const CliRun r = run("recipes --json --file " + path);
  ASSERT_EQ(r.exit_code, 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 10u);
  EXPECT_EQ(j[9]["name"], "mine");
  EXPECT_EQ(j[9]["hadamard"], false);
}

}  // namespace
