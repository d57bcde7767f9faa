// Device == reference, byte for byte, as a RapidCheck property over generated valid
// recipes, page layouts and activation rows (CTest label gpu), checked per cell: each
// cache store format (fp8, bf16, fp4) in each page-size class (1-8, 16-64, 128-256 tokens
// a page), and the test formats (fp32, simulated fp4) at every page size. Every cell gets
// 100 x DSAF_PROPERTY_SCALE cases (default 1 here; gpu_check runs scale 100, 10,000 cases
// a cell, one process per format in parallel: scripts/device_property.sh), each cell from
// its own seed. Half of a cell's cases run a preset of its format instead of a generated
// recipe (the launcher serves the presets with pinned instantiations,
// device/key_store/key_paths.cuh, that a generated recipe matches field for field almost
// never); half run in a grid of one block, whose warps walk several tiles each; and each
// case draws its tile walk (batch order, tile order, or the tile order with its last tiles
// handed out: api.h KeyStoreSchedule), so the schedule the benchmarks time is the one
// checked here. A failure prints the shrunk layout, the kernel, the recipe (as a file for
// generated ones) and a `dsa-fidelity verify` command.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <ostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <rapidcheck.h>

#include "oracle/verdict.h"
#include "properties/page_layout.h"
#include "properties/recipe_gen.h"
#include "properties/reference_cache.h"
#include "reference/recipe_json.h"
#include "tests/device/gpu_test_support.h"

namespace dsaf::test {
namespace {

struct Cell {
  std::string name;  // the test's name suffix (gtest filters pick cells by it)
  ref::StorageFormat format;
  std::vector<int> page_sizes;
  uint64_t seed_offset;  // added to the run's seed (check_cell)
};

// rc::check with the configured parameters (RC_PARAMS), but the seed plus seed_offset:
// rc::check gives every check of a process the same seed, so cells that differ only in
// their page sizes would draw the same recipes, lengths and rows (the three
// fp8 cells of one process would check the same tokens). RC_PARAMS's reproduce
// strings are not read here; a failure prints its recipe, layout and a verify command.
template <class Property>
bool check_cell(const std::string& description, uint64_t seed_offset, Property property) {
  using namespace rc::detail;
  TestParams params = configuration().testParams;
  params.seed += 0x9E3779B97F4A7C15ull * seed_offset;  // 2^64 / golden ratio: far apart
  TestMetadata metadata;
  metadata.id = description;
  metadata.description = description;
  std::cerr << "\n- " << description << " (seed " << params.seed << ")\n";
  const TestResult result = checkProperty(toProperty(property), metadata, params);
  printResultMessage(result, std::cerr);
  std::cerr << "\n";
  return result.template is<SuccessResult>();
}

std::vector<Cell> cells() {
  using ref::StorageFormat;
  const std::vector<std::pair<std::string, std::vector<int>>> classes = {
      {"small_pages", {1, 2, 4, 8}}, {"medium_pages", {16, 32, 64}}, {"large_pages", {128, 256}}};
  // Every page size alike (the layout generator's own draw scales with RapidCheck's size
  // and gives pages of 4 tokens to under 1% of its cases).
  const std::vector<int> all_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<Cell> out;
  for (const auto& [format, name] : {std::pair{StorageFormat::kFp8E4m3fn, "fp8"}, std::pair{StorageFormat::kBf16, "bf16"},
                                     std::pair{StorageFormat::kFp4E2m1, "fp4_e2m1"}}) {
    for (const auto& [class_name, sizes] : classes) {
      out.push_back({std::string(name) + "_" + class_name, format, sizes, out.size()});
    }
  }
  out.push_back({"fp32_all_pages", StorageFormat::kFp32, all_sizes, out.size()});
  out.push_back({"fp4_simulated_bf16_all_pages", StorageFormat::kFp4SimulatedBf16, all_sizes, out.size()});
  return out;
}

void PrintTo(const Cell& cell, std::ostream* os) { *os << cell.name; }

class DevicePropertyGpu : public ::testing::TestWithParam<Cell> {};

TEST_P(DevicePropertyGpu, KeyCacheEqualsReference) {
  DSAF_REQUIRE_GPU();
  const Cell& cell = GetParam();
  const char* scale = std::getenv("DSAF_PROPERTY_SCALE");
  const long cases = 100 * (scale ? std::max(1L, std::strtol(scale, nullptr, 10)) : 1);
  int64_t checked_tokens = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> cases_and_tokens;  // by recipe name
  std::map<int, int64_t> cases_by_page_size;
  std::map<std::string, int64_t> cases_by_kernel;  // width and grid: the log shows both were drawn
  std::vector<std::string> presets;  // the quantising presets of this format
  for (const ref::Recipe& p : ref::presets()) {
    if (p.key_quant.format == cell.format && p.name != "exact") presets.push_back(p.name);
  }
  const bool ok = check_cell("device key cache == reference, " + cell.name, cell.seed_offset, [&] {
    const ref::Recipe recipe = !presets.empty() && *rc::gen::arbitrary<bool>()
                                   ? ref::preset(*rc::gen::elementOf(presets))
                                   : *properties::gen_recipe(cell.format);
    const properties::PagedSequences l = *properties::gen_paged_sequences(4, 200, false, cell.page_sizes);
    properties::KeyInputs in;
    for (int64_t t = 0; t < l.tokens(); ++t) in.rows.push_back(*properties::gen_activation_row());
    const bool bf16 = *rc::gen::arbitrary<bool>();
    if (bf16) {
      for (auto& row : in.rows) to_bf16_bits(row);  // the reference sees the bf16 values
    }
    const std::vector<uint8_t> expected = properties::reference_key_cache(recipe, l, in);

    dev::HostKeyBatch b;
    std::vector<float> flat;
    for (const auto& row : in.rows) flat.insert(flat.end(), row.begin(), row.end());
    b.bf16 = bf16;
    if (bf16) {
      b.input_bf16 = to_bf16_bits(flat);
    } else {
      b.input_f32 = flat;
    }
    int64_t stride = 1;
    for (const auto& table : l.page_tables) stride = std::max<int64_t>(stride, table.size());
    for (size_t s = 0; s < l.page_tables.size(); ++s) {
      std::vector<int32_t> padded = l.page_tables[s];
      padded.resize(stride, 0);
      b.page_tables.insert(b.page_tables.end(), padded.begin(), padded.end());
    }
    b.page_table_stride = stride;
    properties::for_each_token(l, [&](int s, int64_t pos, int64_t) {
      b.seq.push_back(s);
      b.positions.push_back(static_cast<int32_t>(pos));
    });
    b.page_size = l.page_size;
    int64_t longest = 1;
    for (int64_t len : l.seq_lens) longest = std::max(longest, len);
    const ref::RopeTable rope(recipe.rope.table, static_cast<int>(longest));
    b.rope_cos.assign(rope.cos(0), rope.cos(0) + longest * 32);
    b.rope_sin.assign(rope.sin(0), rope.sin(0) + longest * 32);
    b.norm_weight = in.norm_weight;
    b.norm_bias = in.norm_bias;
    b.cache.assign(expected.size(), 0xAA);
    b.recipe = recipe;
    // Our kernel at a drawn lane-group width, in a full grid or one block, on a drawn tile
    // walk (tuning knobs that must not change a bit). These batches are small: in a full
    // grid every persistent warp gets one tile, in one block each walks several, through
    // the steady state of its copy pipeline (and, with producer warps, their hand-offs)
    // that a full grid never reaches.
    static std::map<std::string, std::unique_ptr<dev::KernelUnderTest>> kernels;
    const int lanes = *rc::gen::element(1, 2, 4, 8);
    const bool one_block = *rc::gen::arbitrary<bool>();
    const dev::KeyTileWalk walk =
        *rc::gen::element(dev::KeyTileWalk::kBatchOrder, dev::KeyTileWalk::kTileOrder, dev::KeyTileWalk::kHandOut);
    const std::string kernel =
        "builtin:" + std::to_string(lanes) + (one_block ? ":grid1:" : ":") + dev::to_string(walk);
    if (kernels.count(kernel) == 0) kernels[kernel] = dev::open_kernel(kernel);
    const std::vector<uint8_t> actual = kernels.at(kernel)->key_store(b);
    oracle::CacheOwnership owners{l.page_tables, l.seq_lens};
    const oracle::ByteVerdict v =
        oracle::compare_paged_cache(ref::PagedCacheLayout(recipe.key_quant.format, l.page_size), owners, expected, actual);
    checked_tokens += l.tokens();
    auto& tally = cases_and_tokens[recipe.name];
    tally.first += 1;
    tally.second += l.tokens();
    cases_by_page_size[l.page_size] += 1;
    cases_by_kernel[kernel] += 1;
    if (!v.pass) {
      // The failing recipe as a file, and the verify command that runs it on its own cases.
      const std::string path = ::testing::TempDir() + "dsaf_failing_recipe_" + cell.name + ".json";
      std::ofstream(path) << ref::recipe_to_json(recipe).dump(2) << "\n";
      RC_LOG() << "kernel: " << kernel << "\nlayout: " << l.describe() << "\n" << v.describe() << "\n"
               << "reproduce the recipe with: dsa-fidelity verify --kernel " << kernel << " "
               << (recipe.name == "generated" ? "--recipe-file " + path + " --recipe generated" : "--recipe " + recipe.name)
               << " --seed 1\n";
      RC_FAIL("device key cache differs from the reference");
    }
  });
  // rc::check reads max_success from RC_PARAMS; the scale is reported for the record.
  std::printf("[ %s ] device property: %ld-case budget (DSAF_PROPERTY_SCALE), %lld tokens checked\n", cell.name.c_str(),
              cases, static_cast<long long>(checked_tokens));
  for (const auto& [name, tally] : cases_and_tokens) {
    std::printf("  %-18s %6lld cases %9lld tokens\n", name.c_str(), static_cast<long long>(tally.first),
                static_cast<long long>(tally.second));
  }
  std::string sizes;
  for (const auto& [size, n] : cases_by_page_size) sizes += " " + std::to_string(size) + ": " + std::to_string(n);
  std::printf("  cases by page size:%s\n", sizes.c_str());
  std::string kernels;
  for (const auto& [spec, n] : cases_by_kernel) kernels += " " + spec + ": " + std::to_string(n);
  std::printf("  cases by kernel:%s\n", kernels.c_str());
  EXPECT_TRUE(ok);
}

INSTANTIATE_TEST_SUITE_P(Cells, DevicePropertyGpu, ::testing::ValuesIn(cells()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace dsaf::test

// RapidCheck's case count: 100 x DSAF_PROPERTY_SCALE unless RC_PARAMS is set.
int main(int argc, char** argv) {
  if (std::getenv("RC_PARAMS") == nullptr) {
    const char* scale = std::getenv("DSAF_PROPERTY_SCALE");
    const long factor = scale ? std::max(1L, std::strtol(scale, nullptr, 10)) : 1;
    setenv("RC_PARAMS", ("max_success=" + std::to_string(100 * factor)).c_str(), 1);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
