// File: make_seeds.cc
// Writes the seed corpora of the fuzz targets, so that no binary seeds are committed:
//   fuzz_make_seeds OUT   ->  OUT/safetensors/  OUT/recipe_json/  OUT/page_table/
//                             OUT/cli_arguments/  OUT/shard_merge/
//                             OUT/hdf5_fixture/  OUT/fixture_schema/ (with
//                             DSAF_FUZZ_HAVE_FIXTURE: fixtures/fixture.h exists)
// Seeds are small valid inputs (each exercises the accept path) plus a few near misses.
// Recipe seeds are the presets as recipe_to_json writes them; page-table seeds use the
// encoder in page_table_input.h, so they follow the target's byte format; HDF5 seeds are
// the fixtures of tiny_fixture.h (string attributes rewritten as fixed-length strings,
// see fix_string_attrs); fixture-schema seeds are short edit lists; shard-merge seeds are
// the shard files of a tiny sweep and needle, one a line.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/page_table_input.h"
#include "oracle/shard_files.h"
#include "oracle/shard_plan.h"
#ifdef DSAF_FUZZ_HAVE_FIXTURE
#include "fixtures/cache_capture.h"
#include "fixtures/fixture.h"
#include "fixtures/hdf5_io.h"
#include "fuzz/tiny_fixture.h"
#endif
#include "reference/numeric/minifloat.h"
#include "reference/recipe.h"
#include "reference/recipe_json.h"

namespace {

namespace fs = std::filesystem;
using dsaf::fuzz::PageTableCase;
using dsaf::fuzz::f32_bytes;

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(2);
  }
}

void write_text(const fs::path& path, const std::string& text) {
  write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// [u64 N][N bytes of header][buffer]
std::vector<uint8_t> safetensors(const std::string& header, const std::vector<uint8_t>& buffer) {
  std::vector<uint8_t> out;
  dsaf::fuzz::append_le(out, static_cast<uint64_t>(header.size()));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

void safetensors_seeds(const fs::path& dir) {
  // The test file of tests/fixtures/safetensors_test.cc: F32, BF16, F8_E4M3 and metadata.
  std::vector<uint8_t> buffer = f32_bytes({1, 2, 3, 4, 5, 6.5f});
  for (float v : {1.0f, -2.0f, 0.5f, 3.0f}) dsaf::fuzz::append_le(buffer, dsaf::ref::encode_bf16(v));
  for (uint8_t code : {0x38, 0xB8, 0x7E, 0x01}) buffer.push_back(code);
  write_file(dir / "mixed.safetensors",
             safetensors(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                         R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
                         R"("c":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[32,36]},)"
                         R"("__metadata__":{"format":"pt"}}   )",
                         buffer));

  // A DeepSeek fp8 block-quantised weight [130, 3] with scale_inv [2, 1]: the partial
  // edge block of dequantize_fp8_blocks.
  std::vector<uint8_t> fp8(130 * 3);
  for (size_t i = 0; i < fp8.size(); ++i) fp8[i] = static_cast<uint8_t>(i * 37);
  std::vector<uint8_t> scales = f32_bytes({0.5f, 0.25f});
  fp8.insert(fp8.end(), scales.begin(), scales.end());
  write_file(dir / "fp8_blocks.safetensors",
             safetensors(R"({"w.weight":{"dtype":"F8_E4M3","shape":[130,3],"data_offsets":[0,390]},)"
                         R"("w.weight_scale_inv":{"dtype":"F32","shape":[2,1],"data_offsets":[390,398]}})",
                         fp8));

  // One tensor of every dtype (sizes a whole number of bytes), in header order.
  const std::vector<std::pair<std::string, int>> dtypes = {
      {"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8}, {"I8", 8},
      {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8},
      {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32},
      {"F32", 32}, {"C64", 64}, {"F64", 64}, {"I64", 64}, {"U64", 64}};
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> all;
  for (const auto& [name, bits] : dtypes) {
    const int count = 4;  // 4 x 6 bits = 3 bytes: whole bytes for every dtype
    const int bytes = count * bits / 8;
    header["t_" + name] = {{"dtype", name}, {"shape", {2, 2}}, {"data_offsets", {all.size(), all.size() + bytes}}};
    for (int i = 0; i < bytes; ++i) all.push_back(static_cast<uint8_t>(0x3c + i));
  }
  write_file(dir / "every_dtype.safetensors", safetensors(header.dump(), all));

  // Edge cases the format allows: no tensors, empty tensors, metadata only.
  write_file(dir / "empty.safetensors", safetensors("{}", {}));
  write_file(dir / "zero_size.safetensors",
             safetensors(R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                         R"("y":{"dtype":"BF16","shape":[3,0,2],"data_offsets":[0,0]},)"
                         R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                         f32_bytes({7.0f})));
  write_file(dir / "metadata_only.safetensors", safetensors(R"({"__metadata__":{"a":"b","c":""}})", {}));
  // Near misses: a hole, trailing bytes.
  write_file(dir / "hole.safetensors",
             safetensors(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", {0, 1}));
  write_file(dir / "trailing.safetensors",
             safetensors(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", {0, 1}));
}

void recipe_seeds(const fs::path& dir) {
  nlohmann::json array = nlohmann::json::array();
  for (const dsaf::ref::Recipe& r : dsaf::ref::presets()) {
    const nlohmann::json j = dsaf::ref::recipe_to_json(r);
    write_text(dir / ("preset_" + r.name + ".json"), j.dump(2));
    array.push_back(j);
  }
  write_text(dir / "all_presets.json", array.dump());
  write_text(dir / "based.json", R"({ "base": "sglang-v4-fp8", "name": "my-kernel", "key_quant": { "apply": "divide" } })");
  write_text(dir / "based_fp4.json",
             R"({"base":"sglang-v4-fp4","name":"k","page_size":1,"topk":1,)"
             R"("rope":{"table":{"theta":2.5,"yarn_factor":1}},"key_norm":{"eps":0}})");
  // Near misses: an unknown field, a bad enum, an fp64 recipe with a storage format.
  write_text(dir / "unknown_field.json", R"({"base":"dsv32-ref","name":"x","key_quant":{"blocks":128}})");
  write_text(dir / "bad_enum.json", R"({"base":"dsv32-ref","name":"x","rope":{"pairing":"gptj"}})");
  write_text(dir / "fp64_fp8.json", R"({"base":"exact","name":"x","key_quant":{"format":"fp8_e4m3fn"}})");
}

// fuzz_cli_arguments: arguments separated by NUL bytes, each form the parsers accept and a
// few near misses.
void cli_argument_seeds(const fs::path& dir) {
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"contexts", std::string("2k..64k\0") + "4096,8192\0" + "3000\0" + "1m"},
      {"reals", std::string("0.1..0.9\0") + "0.1..0.9:9\0" + "0.01,0.03,0.1\0" + "-1e308..1e308"},
      {"names", std::string("dsv32-ref,sglang-v4-fp8\0") + "a,,b\0" + ","},
      {"sizes", std::string("512m\0") + "8g\0" + "4096\0" + "2x\0" + "0"},
      {"seeds", std::string("18446744073709551615\0") + "-1\0" + "184467440737095516150\0"},
  };
  for (const auto& [name, text] : seeds) write_text(dir / (name + ".txt"), text);
}

// fuzz_shard_merge: the shard files of a tiny study, one a line: all shards (1 and 2 of
// them), and near misses (a shard missing, one given twice).
template <class Config, class Unit, class RunUnits, class ShardJson>
void study_shard_seeds(const fs::path& dir, const std::string& study, const Config& config,
                       const std::vector<Unit>& units, RunUnits run_units, ShardJson shard_json) {
  namespace o = dsaf::oracle;
  const o::ShardOrigin origin{"0.0.0", "seed", "dsa-fidelity " + study + " ...", ""};
  for (const int count : {1, 2}) {
    std::vector<std::string> lines;
    for (int i = 0; i < count; ++i) {
      const o::Shard shard{i, count};
      const auto results = run_units(config, o::units_of_shard(units, shard), nullptr);
      lines.push_back(o::shard_file_text(shard_json(config, shard, origin, results)));
    }
    std::string all;
    for (const std::string& line : lines) all += line;
    write_text(dir / (study + "_" + std::to_string(count) + "_of_" + std::to_string(count) + ".txt"), all);
    if (count == 2) {
      write_text(dir / (study + "_missing_shard.txt"), lines[1]);
      write_text(dir / (study + "_repeated_shard.txt"), lines[0] + lines[0]);
    }
  }
}

void shard_merge_seeds(const fs::path& dir) {
  namespace o = dsaf::oracle;
  o::SyntheticSpec activations;
  activations.num_heads = 2;
  o::SweepConfig sweep;
  sweep.recipes = {dsaf::ref::preset("dsv32-ref")};
  sweep.contexts = {64, 96};
  sweep.seeds = {1};
  sweep.queries = 2;
  sweep.topk = 4;
  sweep.activations = activations;
  study_shard_seeds(dir, "sweep", sweep, o::sweep_units(o::sweep_layout(sweep)), o::run_sweep_units,
                    o::sweep_shard_json);
  o::NeedleConfig needle;
  needle.recipes = {dsaf::ref::preset("sglang-v4-fp8")};
  needle.contexts = {64, 96};
  needle.depths = {0.5};
  needle.margins = {0.1};
  needle.trials = 1;
  needle.topk = 4;
  needle.activations = activations;
  study_shard_seeds(dir, "needle", needle, o::needle_units(o::needle_layout(needle)), o::run_needle_units,
                    o::needle_shard_json);
}

void page_table_seeds(const fs::path& dir) {
  using dsaf::ref::StorageFormat;
  const auto code = [](StorageFormat f) { return static_cast<uint8_t>(f); };
  std::vector<std::pair<std::string, PageTableCase>> cases;
  {
    PageTableCase c;  // fp8, P = 4, two sequences sharing a 5-page pool, probes at the edges
    c.format = code(StorageFormat::kFp8E4m3fn);
    c.page_size = 4;
    c.num_pages = 5;
    c.cache_pages = 5;
    c.seqs = {{10, {4, 0, 2}}, {5, {1, 3}}};
    c.probes = {{0, 11}, {0, 12}, {1, 7}, {1, 8}, {0, -1}};
    cases.emplace_back("fp8_two_seqs", c);
  }
  {
    PageTableCase c;  // bf16, P = 1
    c.format = code(StorageFormat::kBf16);
    c.page_size = 1;
    c.num_pages = 3;
    c.cache_pages = 3;
    c.seqs = {{3, {2, 1, 0}}};
    cases.emplace_back("bf16_p1", c);
  }
  {
    PageTableCase c;  // fp4, P = 64, buffer one byte short of its last page
    c.format = code(StorageFormat::kFp4E2m1);
    c.page_size = 64;
    c.num_pages = 2;
    c.cache_pages = 2;
    c.cache_slack = -1;
    c.seqs = {{128, {0, 1}}};
    cases.emplace_back("fp4_short_buffer", c);
  }
  {
    PageTableCase c;  // fp32, P = 256, aliased pages and a page outside the pool
    c.format = code(StorageFormat::kFp32);
    c.page_size = 256;
    c.num_pages = 2;
    c.cache_pages = 2;
    c.seqs = {{600, {1, 1, 7}}};
    cases.emplace_back("fp32_alias", c);
  }
  {
    PageTableCase c;  // fp4-simulated bf16, P = 16, num_pages larger than the buffer
    c.format = code(StorageFormat::kFp4SimulatedBf16);
    c.page_size = 16;
    c.num_pages = 1000;
    c.cache_pages = 1;
    c.seqs = {{40, {0, 999, 0}}};
    cases.emplace_back("fp4sim_large_pool", c);
  }
  {
    PageTableCase c;  // page sizes the layout must reject
    c.format = code(StorageFormat::kFp8E4m3fn);
    c.page_size = 48;
    cases.emplace_back("bad_page_size", c);
  }
  for (const auto& [name, c] : cases) write_file(dir / (name + ".bin"), dsaf::fuzz::encode_page_table_case(c));
}

#ifdef DSAF_FUZZ_HAVE_FIXTURE
// Rewrites every string attribute of `object` (and of its members, recursively) as a
// fixed-length UTF-8 string, which the loader also accepts (hdf5_io.h). write_fixture
// stores variable-length strings, whose bytes sit in a global heap; libhdf5 1.10.8 hangs
// or overruns memory on a damaged global heap within a few hundred mutations
// (fuzz/crashes/README.md), which would leave the fuzzer rediscovering that one bug.
// Seeds without variable-length data steer it to the rest of the format and the loader.
void fix_string_attrs(const dsaf::fixtures::h5::Object& object) {
  namespace h5 = dsaf::fixtures::h5;
  for (const std::string& name : h5::attr_names(object)) {
    if (h5::attr_kind(object, name) != h5::AttrKind::kString) continue;
    std::string value = h5::read_string_attr(object, name);
    h5::delete_attr(object, name);
    value.resize(std::max<size_t>(value.size(), 1), '\0');
    const h5::Handle type(H5Tcopy(H5T_C_S1));
    const h5::Handle space(H5Screate(H5S_SCALAR));
    bool ok = type.valid() && space.valid() && H5Tset_size(type.get(), value.size()) >= 0 &&
              H5Tset_strpad(type.get(), H5T_STR_NULLPAD) >= 0 && H5Tset_cset(type.get(), H5T_CSET_UTF8) >= 0;
    const h5::Handle attr(ok ? H5Acreate2(object.id(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)
                             : H5I_INVALID_HID);
    ok = attr.valid() && H5Awrite(attr.get(), type.get(), value.data()) >= 0;
    if (!ok) {
      std::fprintf(stderr, "cannot rewrite %s as a fixed-length string\n", object.where(name).c_str());
      std::exit(2);
    }
  }
  if (object.path != "/" && H5Iget_type(object.id()) != H5I_GROUP) return;
  for (const h5::Member& member : h5::list_members(object)) {
    if (member.kind == h5::MemberKind::kGroup) fix_string_attrs(h5::open_group(object, member.name));
    if (member.kind == h5::MemberKind::kDataset) fix_string_attrs(h5::open_dataset(object, member.name));
  }
}

// fuzz_fixture_schema reads a base fixture (first byte) and edits (fuzz_fixture_schema.cc):
// both fixtures unchanged, and a few single edits.
void fixture_schema_seeds(const fs::path& dir) {
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds = {
      {"slice", {0}},
      {"capture", {1}},
      {"slice_set_attr", {0, 0, 0, 200, 1, 5}},         // an existing root attribute := 5
      {"capture_byte", {1, 2, 3, 0, 0, 0xff}},          // one byte of a dataset
      {"slice_reshape", {0, 3, 1, 1, 8, 0x38}},         // a dataset reshaped to [8, ...]
      {"capture_delete", {1, 6, 0, 0}},                 // a member of the root deleted
      {"slice_nan_fill", {0, 9, 1, 0x7f}},              // a dataset filled with e4m3fn NaN
  };
  for (const auto& [name, bytes] : seeds) write_file(dir / (name + ".bin"), bytes);
}

void hdf5_fixture_seeds(const fs::path& dir) {
  for (const char* kind : {"checkpoint_slice", "activation_capture"}) {
    const std::string path = (dir / (std::string(kind) + ".h5")).string();
    const dsaf::fixtures::Fixture fixture = dsaf::fuzz::tiny_fixture(kind);
    dsaf::fixtures::write_fixture(fixture, path);
    const std::string before = dsaf::fixtures::describe_fixture(dsaf::fixtures::open_fixture(path));
    {
      dsaf::fixtures::h5::File file = dsaf::fixtures::h5::File::open_read_write(path);
      fix_string_attrs(file.root());
      file.close();
    }
    // The rewritten file must still be the same valid fixture.
    if (dsaf::fixtures::describe_fixture(dsaf::fixtures::open_fixture(path)) != before) {
      std::fprintf(stderr, "%s reads differently after the string rewrite\n", path.c_str());
      std::exit(2);
    }
  }
}

// fuzz_cache_capture: two tiny valid captures (a slot map with an unwritten token, and
// sequences with page tables), written by write_cache_capture.
void cache_capture_seeds(const fs::path& dir) {
  for (int variant = 0; variant < 2; ++variant) {
    dsaf::fixtures::CacheCapture c;
    c.engine = "fuzz seed";
    c.kernel = "none";
    c.generator = "fuzz_make_seeds";
    c.recipe = variant == 0 ? "sglang-v4-fp8" : "sglang-v4-fp4";
    c.format = variant == 0 ? dsaf::ref::StorageFormat::kFp8E4m3fn : dsaf::ref::StorageFormat::kFp4E2m1;
    c.page_size = 4;
    constexpr int kTokens = 6;
    for (int t = 0; t < kTokens; ++t) {
      c.positions.push_back(t);
      for (int i = 0; i < 128; ++i) c.k.push_back(static_cast<float>((t * 128 + i) % 17 - 8) / 8.0f);
    }
    c.norm_weight.assign(128, 1.0f);
    c.rope_cos.assign(kTokens * 32, 1.0f);
    c.rope_sin.assign(kTokens * 32, 0.0f);
    if (variant == 0) {
      c.slots = {0, 1, 2, 3, 4, -1};
    } else {
      c.seq.assign(kTokens, 0);
      c.page_tables = {1, 0};
      c.page_table_stride = 2;
    }
    const int token_bytes = variant == 0 ? 132 : 68;
    c.cache.resize(static_cast<size_t>(2 * c.page_size * token_bytes));
    for (size_t i = 0; i < c.cache.size(); ++i) c.cache[i] = static_cast<uint8_t>(i * 7);
    const std::string path = (dir / (variant == 0 ? "slots.h5" : "page_tables.h5")).string();
    dsaf::fixtures::write_cache_capture(c, path);
    {  // fixed-length strings, as hdf5_fixture_seeds (docs/fuzzing.md: libhdf5's global heap)
      dsaf::fixtures::h5::File file = dsaf::fixtures::h5::File::open_read_write(path);
      fix_string_attrs(file.root());
      file.close();
    }
    const dsaf::fixtures::CacheCapture back = dsaf::fixtures::read_cache_capture(path);
    if (back.cache != c.cache || back.k != c.k) {
      std::fprintf(stderr, "%s reads differently after the string rewrite\n", path.c_str());
      std::exit(2);
    }
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* sub : {"safetensors", "recipe_json", "page_table", "cli_arguments", "shard_merge"}) {
    fs::create_directories(out / sub);
  }
  cli_argument_seeds(out / "cli_arguments");
  safetensors_seeds(out / "safetensors");
  recipe_seeds(out / "recipe_json");
  page_table_seeds(out / "page_table");
  shard_merge_seeds(out / "shard_merge");
#ifdef DSAF_FUZZ_HAVE_FIXTURE
  fs::create_directories(out / "hdf5_fixture");
  hdf5_fixture_seeds(out / "hdf5_fixture");
  fs::create_directories(out / "fixture_schema");
  fixture_schema_seeds(out / "fixture_schema");
  fs::create_directories(out / "cache_capture");
  cache_capture_seeds(out / "cache_capture");
#endif
  return 0;
}
