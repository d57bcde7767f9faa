// `dsa-fidelity compare` and `detect` on cache captures, as a user meets them: exit codes,
// the located first mismatch, the field that explains a near miss, and one stderr line
// naming the dataset for every kind of bad capture.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fixtures/cache_capture.h"
#include "reference/paged_cache.h"
#include "reference/recipe.h"
#include "tests/fixtures/cache_capture_test_support.h"
#include "tests/fixtures/fixture_test_support.h"

namespace dsaf::fixtures {
namespace {

namespace fs = std::filesystem;
using namespace testing_support;

const std::string kShipped = std::string(DSAF_FIXTURE_DATA_DIR) + "/sglang_v4_fp8_cache_capture.h5";

TEST(CliCompare, ShippedCapturePassesWithItsRecipe) {
  const CliResult r = run_cli("compare --capture " + kShipped + " --recipe sglang-v4-fp8");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("PASS byte-exact against sglang-v4-fp8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("placed by a slot map"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASSED"), std::string::npos);
}

// A capture our fp4 key kernel wrote on the H200 (`verify --kernel builtin --recipe
// sglang-v4-fp4 --save-capture`; fixtures/data/README.md): the GPU's bytes pass against the
// preset here, without a GPU, and fail against the same recipe with zero codes signed as
// their values are (key_quant.fp4_zero_sign "keep"), the rule SGLang's kernel does not follow.
TEST(CliCompare, AGpuWrittenFp4CapturePassesAndNeedsItsZeroSignRule) {
  const std::string gpu = std::string(DSAF_FIXTURE_DATA_DIR) + "/builtin_sglang_v4_fp4_capture.h5";
  const CliResult pass = run_cli("compare --capture " + gpu + " --recipe sglang-v4-fp4");
  EXPECT_EQ(pass.exit_code, 0) << pass.out;
  EXPECT_NE(pass.out.find("PASS byte-exact against sglang-v4-fp4"), std::string::npos) << pass.out;
  const fs::path dir = fresh_dir("capture_cli_zero_sign");
  const std::string recipes = (dir / "signed_zero.json").string();
  std::ofstream(recipes) << R"([{"base": "sglang-v4-fp4", "name": "signed-zero", "key_quant": {"fp4_zero_sign": "keep"}}])";
  const CliResult fail = run_cli("compare --capture " + gpu + " --recipe-file " + recipes + " --recipe signed-zero");
  EXPECT_EQ(fail.exit_code, 1) << fail.out;
  EXPECT_NE(fail.out.find("explained by one recipe field: key_quant.fp4_zero_sign"), std::string::npos) << fail.out;
}

TEST(CliCompare, AFlippedCacheByteFailsWithItsExactLocation) {
  CacheCapture c = read_cache_capture(kShipped);
  const int64_t token = 1234, element = 77;
  const int64_t slot = c.slots[token];
  const ref::PagedCacheLayout layout(c.format, c.page_size);
  const ref::CacheLocation at{slot / c.page_size, static_cast<int>(slot % c.page_size)};
  c.cache[layout.value_offset(at) + element] ^= 0x08;
  const fs::path dir = fresh_dir("capture_cli_flip");
  const std::string path = (dir / "flipped.h5").string();
  write_cache_capture(c, path);  // checksums valid: only the bytes are wrong
  const std::string json = (dir / "out.json").string();
  const CliResult r = run_cli("compare --capture " + path + " --recipe sglang-v4-fp8 --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const std::string where = "First mismatch: token " + std::to_string(token) + " (position " +
                            std::to_string(c.positions[token]) + "), page " + std::to_string(at.page) + " slot " +
                            std::to_string(at.offset) + ", value element " + std::to_string(element) + ", byte ";
  EXPECT_NE(r.out.find("1 of 329472 bytes differ, in 1 of 2496 written tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(where), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos);
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["pass"], false);
  EXPECT_EQ(j["verdict"]["first_mismatch"]["token"], token);
  EXPECT_EQ(j["verdict"]["first_mismatch"]["page"], at.page);
  EXPECT_EQ(j["verdict"]["first_mismatch"]["slot"], at.offset);
  EXPECT_EQ(j["verdict"]["first_mismatch"]["field"], "value");
  EXPECT_EQ(j["verdict"]["first_mismatch"]["element"], element);
}

TEST(CliDetect, NamesTheRecipeWithoutOne) {
  for (const std::string command : {"compare", "detect"}) {
    const CliResult r = run_cli(command + " --capture " + kShipped);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("byte-exact match: sglang-v4-fp8."), std::string::npos) << r.out;
  }
  const CliResult narrowed = run_cli("detect --capture " + kShipped + " --recipes sglang-v4-bf16,dsv4-ref");
  EXPECT_EQ(narrowed.exit_code, 1) << narrowed.out;
  EXPECT_NE(narrowed.out.find("no candidate recipe writes this cache layout"), std::string::npos) << narrowed.out;
}

TEST(CliDetect, NamesExactlyTheOneChangedField) {
  ref::Recipe mutant = ref::preset("sglang-v4-fp8");
  mutant.name = "sglang-v4-fp8-times-reciprocal-scale";
  mutant.key_quant.divisor = ref::ScaleDivisor::kTimesReciprocal;
  const fs::path dir = fresh_dir("capture_cli_mutant");
  const std::string path = (dir / "mutant.h5").string();
  CacheCapture c = small_capture(mutant, true);
  FixtureTensor weights;
  weights.dtype = TensorDtype::kF32;
  weights.shape = {c.tokens(), 1};
  weights.bytes.assign(c.tokens() * 4, 0);
  c.outputs["weights"] = weights;
  write_cache_capture(c, path);
  const std::string change = "key_quant.divisor: \"divide\" -> \"times_reciprocal\"";
  const CliResult detect = run_cli("compare --capture " + path);
  EXPECT_EQ(detect.exit_code, 1) << detect.out;
  EXPECT_NE(detect.out.find("closest: sglang-v4-fp8"), std::string::npos) << detect.out;
  EXPECT_NE(detect.out.find("explained by one field change of sglang-v4-fp8:\n  " + change + "\n"), std::string::npos)
      << detect.out;
  EXPECT_NE(detect.out.find("query/logits/top-K datasets present but not compared: weights"), std::string::npos);
  const CliResult compare = run_cli("compare --capture " + path + " --recipe sglang-v4-fp8");
  EXPECT_EQ(compare.exit_code, 1) << compare.out;
  EXPECT_NE(compare.out.find("  explained by one recipe field: " + change + "\nquery"), std::string::npos) << compare.out;
  // The same capture placed by page tables reads the same way, and names sequences.
  const std::string tables = (dir / "tables.h5").string();
  write_cache_capture(small_capture(mutant, false), tables);
  const CliResult by_table = run_cli("compare --capture " + tables + " --recipe sglang-v4-fp8");
  EXPECT_EQ(by_table.exit_code, 1) << by_table.out;
  EXPECT_NE(by_table.out.find("(sequence "), std::string::npos) << by_table.out;
  EXPECT_NE(by_table.out.find("page tables of 3 sequences"), std::string::npos) << by_table.out;
}

TEST(CliCompare, BadCapturesExitTwoWithOneLineNamingTheProblem) {
  const fs::path dir = fresh_dir("capture_cli_bad");
  const std::string good = (dir / "good.h5").string();
  write_cache_capture(small_capture(ref::preset("sglang-v4-fp8"), true), good);
  const CacheCapture c = read_cache_capture(good);
  const auto slots_with = [&](int64_t token, int64_t slot) {
    std::vector<int64_t> s = c.slots;
    s[token] = slot;
    return int_dataset(TensorDtype::kI64, s, {c.tokens()});
  };
  std::vector<int64_t> positions(c.positions.begin(), c.positions.end());
  positions[6] = 80;
  FixtureTensor short_rope = stored_dataset(good, "rope_cos");
  short_rope.shape = {40, 32};
  short_rope.bytes.resize(40 * 32 * 4);
  FixtureTensor short_positions = int_dataset(TensorDtype::kI32, positions, {c.tokens()});
  short_positions.shape = {c.tokens() - 1};
  short_positions.bytes.resize((c.tokens() - 1) * 4);
  const std::vector<std::tuple<std::string, std::function<void(const std::string&)>, std::string>> cases = {
      {"slot_outside", [&](const std::string& p) { replace_dataset(p, "slots", slots_with(2, 16 * 16 + 5)); },
       "/slots: token 2 names slot 261, outside the cache (16 pages of 16 slots)"},
      {"slot_twice", [&](const std::string& p) { replace_dataset(p, "slots", slots_with(8, c.slots[1])); },
       "/slots: tokens 1 and 8 are both written to slot"},
      {"position_beyond", [&](const std::string& p) {
         replace_dataset(p, "positions", int_dataset(TensorDtype::kI32, positions, {c.tokens()}));
       },
       "/positions: token 6 is at position 80, outside the RoPE table's 80 rows"},
      {"short_rope", [&](const std::string& p) {
         replace_dataset(p, "rope_cos", short_rope);
         FixtureTensor sin = stored_dataset(p, "rope_sin");
         sin.shape = {40, 32};
         sin.bytes.resize(40 * 32 * 4);
         replace_dataset(p, "rope_sin", sin);
       },
       "/positions: token 38 is at position 40, outside the RoPE table's 40 rows (/rope_cos)"},
      {"cos_sin_differ", [&](const std::string& p) { replace_dataset(p, "rope_cos", short_rope); },
       "/rope_sin: shape [80, 32] but /rope_cos needs [40, 32]"},
      {"sizes_differ", [&](const std::string& p) { replace_dataset(p, "positions", short_positions); },
       "/positions: shape [" + std::to_string(c.tokens() - 1) + "] but /k's T needs [" + std::to_string(c.tokens()) + "]"},
      {"missing", [&](const std::string& p) { delete_dataset(p, "k"); }, "/k: missing"},
  };
  for (const auto& [name, amend, message] : cases) {
    const std::string path = (dir / (name + ".h5")).string();
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    amend(path);
    for (const std::string command : {"compare --recipe sglang-v4-fp8", "detect"}) {
      const CliResult r = run_cli(command + " --capture " + path);
      EXPECT_EQ(r.exit_code, 2) << name << ": " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << name << ": " << r.err;
      EXPECT_NE(r.err.find(path + ": " + message), std::string::npos) << name << ": " << r.err;
    }
  }
  EXPECT_EQ(run_cli("compare --capture " + good + " --recipe no-such-recipe").exit_code, 2);
  EXPECT_EQ(run_cli("compare --capture " + good + " --recipe sglang-v4-bf16").exit_code, 2);
  EXPECT_EQ(run_cli("compare --recipe sglang-v4-fp8").exit_code, 2);  // --capture is required
}

}  // namespace
}  // namespace dsaf::fixtures
