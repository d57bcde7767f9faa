// File: fuzz_fixture_schema.cc
// libFuzzer target, the structure-aware companion of fuzz_hdf5_fixture: bytes -> a list
// of edits to the HDF5 tree of a valid fixture (tiny_fixture.h) -> a well-formed HDF5
// file written through fixtures/hdf5_io.h -> open_fixture. Raw HDF5 bytes rarely get past
// libhdf5's metadata checksums and the datasets' sha256 attributes; here every input is a
// sound HDF5 file whose sha256 attributes match the data (unless an edit sets one), so
// the fuzzer works on the loader's SCHEMA.md rules instead: attribute kinds and values,
// shapes against extents and model facts, dtypes against storage types, quantisation
// pairs, paged caches and page tables, group structure, layer numbers, non-finite values.
// Rejection must be a dsaf::Error; accepted fixtures pass check_accepted_fixture.
//
// Input: up to kMaxEdits edits, each an opcode byte and its operands (ByteReader: reads
// past the end give zeros). Values come from small tables of interesting ones (a table
// index) or from the input itself (an index past the table).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fixtures/checksum.h"
#include "fixtures/fixture.h"
#include "fixtures/hdf5_io.h"
#include "fuzz/byte_reader.h"
#include "fuzz/fixture_checks.h"
#include "fuzz/harness.h"
#include "fuzz/tiny_fixture.h"
#include "reference/error.h"

namespace {

namespace h5 = dsaf::fixtures::h5;
using dsaf::fuzz::ByteReader;

constexpr int kMaxEdits = 16;
constexpr int64_t kMaxElements = 4096;  // per dataset, after an edit

// ---- The tree ------------------------------------------------------------------------

struct AttrValue {
  h5::AttrKind kind = h5::AttrKind::kString;
  std::string text;
  int64_t integer = 0;
  double real = 0;
  std::vector<int64_t> array;
};
using Attrs = std::map<std::string, AttrValue>;

struct Dataset {
  h5::StorageType type = h5::StorageType::kU8;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // product(dims) x type bytes
  Attrs attrs;
  bool auto_sha256 = true;  // sha256 attribute recomputed from `bytes` when written
};

struct Group {
  Attrs attrs;
  std::map<std::string, Group> groups;
  std::map<std::string, Dataset> datasets;
};

Attrs read_attrs(const h5::Object& object) {
  Attrs out;
  for (const std::string& name : h5::attr_names(object)) {
    AttrValue v;
    v.kind = h5::attr_kind(object, name);
    switch (v.kind) {
      case h5::AttrKind::kString: v.text = h5::read_string_attr(object, name); break;
      case h5::AttrKind::kInteger: v.integer = h5::read_int_attr(object, name); break;
      case h5::AttrKind::kFloat: v.real = h5::read_float_attr(object, name); break;
      case h5::AttrKind::kIntegerArray: v.array = h5::read_int_array_attr(object, name); break;
      case h5::AttrKind::kOther: continue;
    }
    out[name] = v;
  }
  return out;
}

Group read_group(const h5::Object& object) {
  Group g;
  g.attrs = read_attrs(object);
  for (const h5::Member& m : h5::list_members(object)) {
    if (m.kind == h5::MemberKind::kGroup) g.groups[m.name] = read_group(h5::open_group(object, m.name));
    if (m.kind != h5::MemberKind::kDataset) continue;
    const h5::Object d = h5::open_dataset(object, m.name);
    const h5::DatasetInfo info = h5::dataset_info(d, int64_t{1} << 30);
    Dataset ds;
    ds.type = info.type;
    ds.dims = info.dims;
    ds.bytes = h5::read_dataset_bytes(d, info);
    ds.attrs = read_attrs(d);
    g.datasets[m.name] = ds;
  }
  return g;
}

void write_attrs(const h5::Object& object, const Attrs& attrs) {
  for (const auto& [name, v] : attrs) {
    switch (v.kind) {
      case h5::AttrKind::kString: h5::set_attr(object, name, v.text); break;
      case h5::AttrKind::kInteger: h5::set_attr(object, name, v.integer); break;
      case h5::AttrKind::kFloat: h5::set_attr(object, name, v.real); break;
      case h5::AttrKind::kIntegerArray: h5::set_attr(object, name, v.array); break;
      case h5::AttrKind::kOther: break;
    }
  }
}

void write_group(const h5::Object& object, const Group& g) {
  write_attrs(object, g.attrs);
  for (const auto& [name, child] : g.groups) write_group(h5::create_group(object, name), child);
  for (const auto& [name, ds] : g.datasets) {
    const h5::Object d = h5::create_dataset(object, name, ds.type, ds.dims, ds.bytes.data());
    Attrs attrs = ds.attrs;
    if (ds.auto_sha256) {
      AttrValue sha;
      sha.text = dsaf::fixtures::sha256_hex(ds.bytes.data(), ds.bytes.size());
      attrs["sha256"] = sha;
    }
    write_attrs(d, attrs);
  }
}

// The valid starting point: both tiny fixtures, as write_fixture lays them out, merged
// into one tree and picked by the first byte of the input.
const Group& base_tree(int which) {
  static const std::vector<Group> trees = [] {
    std::vector<Group> out;
    dsaf::fuzz::ScratchFile file(".h5");
    for (const char* kind : {"checkpoint_slice", "activation_capture"}) {
      dsaf::fixtures::write_fixture(dsaf::fuzz::tiny_fixture(kind), file.path());
      const h5::File f = h5::File::open_read_only(file.path());
      out.push_back(read_group(f.root()));
    }
    return out;
  }();
  return trees[which % trees.size()];
}

// ---- Values ----------------------------------------------------------------------------

const std::vector<std::string>& string_table() {
  static const std::vector<std::string> t = {
      "", "none", "row_major", "paged_index_k", "bf16", "f8_e4m3fn", "f8_e8m0", "f4_e2m1", "f32", "i32", "u8",
      "fp8_e4m3fn", "fp4_e2m1", "fp32", "ue8m0", "checkpoint_slice", "activation_capture", "deepseek_v32",
      "deepseek_v4", "sglang-v4-bf16", "dsv32-ref", "{}", "{\"type\":\"yarn\",\"factor\":40}", "[1]", "{", "null",
      "synthetic:x", std::string(64, '0'), std::string(64, 'F'), std::string(63, 'a'), "heads 0..1 of 2",
      std::string("a\0b", 3), "\xff\xfe", "x"};
  return t;
}

const std::vector<int64_t>& int_table() {
  static const std::vector<int64_t> t = {0, 1, -1, 2, 3, 4, 5, 7, 8, 16, 32, 64, 128, 256, 512, 1 << 24, (1 << 24) + 1,
                                         1'000'000, 1'000'001, std::numeric_limits<int64_t>::max(),
                                         std::numeric_limits<int64_t>::min(), int64_t{1} << 32, 2147483647,
                                         2147483648LL};
  return t;
}

const std::vector<double>& real_table() {
  static const std::vector<double> t = {0.0, -0.0, 1.0, 10000.0, 160000.0, -1.0, 1e308, 5e-324,
                                        std::numeric_limits<double>::quiet_NaN(),
                                        std::numeric_limits<double>::infinity(),
                                        -std::numeric_limits<double>::infinity()};
  return t;
}

const std::vector<std::string>& attr_name_table() {
  static const std::vector<std::string> t = {
      "schema_version", "kind", "model_type", "hidden_size", "q_lora_rank", "index_n_heads", "index_head_dim",
      "qk_rope_head_dim", "index_topk", "rope_theta", "rope_scaling", "synthetic", "synthetic_label", "generator",
      "notes", "config_json", "compress_ratio", "dtype", "shape", "layout", "quant_block", "scale_fmt", "recipe",
      "source", "sha256", "full_shape", "reduced", "page_size", "key_format", "unknown"};
  return t;
}

const std::vector<std::string>& member_name_table() {
  static const std::vector<std::string> t = {
      "layers", "activations", "indexer", "0", "3", "4", "007", "-1", "1000000", "1000001", "99999999", "x1",
      "positions", "x", "qr", "q", "k", "weights", "index_k_cache", "page_table", "wq_b.weight", "wq_b.scale",
      "wk.weight", "wk.scale", "weights_proj.weight", "k_norm.weight", "k_norm.bias", "extra.weight", "extra"};
  return t;
}

int64_t read_int(ByteReader& in) {
  const uint8_t pick = in.read<uint8_t>();
  if (pick < int_table().size()) return int_table()[pick];
  if (pick < 200) return static_cast<int64_t>(pick) - 100;  // small: -76 .. 99
  return in.read<int64_t>();
}

std::string read_string(ByteReader& in) {
  const uint8_t pick = in.read<uint8_t>();
  if (pick < string_table().size()) return string_table()[pick];
  std::string s(in.read<uint8_t>() % 24, '\0');
  for (char& c : s) c = static_cast<char>(in.read<uint8_t>());
  return s;
}

AttrValue read_value(ByteReader& in) {
  AttrValue v;
  switch (in.read<uint8_t>() % 4) {
    case 0:
      v.kind = h5::AttrKind::kString;
      v.text = read_string(in);
      break;
    case 1:
      v.kind = h5::AttrKind::kInteger;
      v.integer = read_int(in);
      break;
    case 2: {
      v.kind = h5::AttrKind::kFloat;
      const uint8_t pick = in.read<uint8_t>();
      if (pick < real_table().size()) {
        v.real = real_table()[pick];
      } else {
        const uint64_t bits = in.read<uint64_t>();
        std::memcpy(&v.real, &bits, sizeof bits);
      }
      break;
    }
    default:
      v.kind = h5::AttrKind::kIntegerArray;
      v.array.resize(in.read<uint8_t>() % 5);
      for (int64_t& x : v.array) x = read_int(in);
      // libhdf5 refuses a zero-length array attribute; the writer cannot express it.
      if (v.array.empty()) v.array.push_back(0);
      break;
  }
  return v;
}

// ---- Edits -----------------------------------------------------------------------------

struct Nodes {
  std::vector<Attrs*> attrs;       // root, groups, datasets
  std::vector<Group*> groups;      // root first
  std::vector<Dataset*> datasets;
};

void collect(Group& g, Nodes& n) {
  n.attrs.push_back(&g.attrs);
  n.groups.push_back(&g);
  for (auto& [name, child] : g.groups) collect(child, n);
  for (auto& [name, ds] : g.datasets) {
    n.attrs.push_back(&ds.attrs);
    n.datasets.push_back(&ds);
  }
}

template <class T>
T* pick(std::vector<T*>& from, ByteReader& in) {
  const uint8_t i = in.read<uint8_t>();
  return from.empty() ? nullptr : from[i % from.size()];
}

int type_bytes(h5::StorageType type) { return h5::storage_type_bytes(type); }

// Resizes to product(dims) x type bytes, repeating the old bytes (or `fill`).
void fit_bytes(Dataset& ds, uint8_t fill) {
  int64_t n = 1;
  for (int64_t d : ds.dims) n *= d;
  const size_t want = static_cast<size_t>(n * type_bytes(ds.type));
  std::vector<uint8_t> out(want, fill);
  for (size_t i = 0; i < want && !ds.bytes.empty(); ++i) out[i] = ds.bytes[i % ds.bytes.size()];
  ds.bytes = std::move(out);
}

void apply_edit(Group& root, ByteReader& in) {
  Nodes n;
  collect(root, n);
  const uint8_t op = in.read<uint8_t>() % 10;
  switch (op) {
    case 0: {  // set an attribute (an existing name or one from the table)
      Attrs* a = pick(n.attrs, in);
      const uint8_t which = in.read<uint8_t>();
      std::string name = attr_name_table()[which % attr_name_table().size()];
      if (which >= 128 && !a->empty()) {
        auto it = a->begin();
        std::advance(it, which % a->size());
        name = it->first;
      }
      (*a)[name] = read_value(in);
      if (name == "sha256") {
        for (Dataset* ds : n.datasets) {
          if (&ds->attrs == a) ds->auto_sha256 = false;
        }
      }
      break;
    }
    case 1: {  // delete an attribute
      Attrs* a = pick(n.attrs, in);
      const uint8_t which = in.read<uint8_t>();
      if (!a->empty()) {
        auto it = a->begin();
        std::advance(it, which % a->size());
        a->erase(it);
      }
      break;
    }
    case 2: {  // change one byte of a dataset (sha256 follows)
      Dataset* ds = pick(n.datasets, in);
      const uint16_t at = in.read<uint16_t>();
      const uint8_t value = in.read<uint8_t>();
      if (ds != nullptr && !ds->bytes.empty()) ds->bytes[at % ds->bytes.size()] = value;
      break;
    }
    case 3: {  // reshape a dataset
      Dataset* ds = pick(n.datasets, in);
      std::vector<int64_t> dims(1 + in.read<uint8_t>() % 3);
      int64_t elements = 1;
      for (int64_t& d : dims) {
        const uint8_t v = in.read<uint8_t>();
        d = v < 16 ? v : (v < 32 ? int64_t{1} << (v - 16) : v);  // 0..15, powers of two, bytes
        elements *= std::max<int64_t>(d, 1);
      }
      if (ds != nullptr && elements <= kMaxElements) {
        ds->dims = dims;
        fit_bytes(*ds, in.read<uint8_t>());
      }
      break;
    }
    case 4: {  // change a dataset's storage type
      Dataset* ds = pick(n.datasets, in);
      const h5::StorageType types[] = {h5::StorageType::kU8, h5::StorageType::kU16, h5::StorageType::kI32,
                                       h5::StorageType::kF32};
      const h5::StorageType type = types[in.read<uint8_t>() % 4];
      if (ds != nullptr) {
        ds->type = type;
        fit_bytes(*ds, 0);
      }
      break;
    }
    case 5: {  // copy a dataset into a group under a table name
      Group* g = pick(n.groups, in);
      Dataset* ds = pick(n.datasets, in);
      const std::string& name = member_name_table()[in.read<uint8_t>() % member_name_table().size()];
      if (ds != nullptr && !g->groups.count(name) && n.attrs.size() < 64) {
        Dataset added = *ds;
        g->datasets[name] = std::move(added);
      }
      break;
    }
    case 6: {  // delete a member
      Group* g = pick(n.groups, in);
      const uint8_t which = in.read<uint8_t>();
      const size_t members = g->groups.size() + g->datasets.size();
      if (members == 0) break;
      const size_t i = which % members;
      if (i < g->groups.size()) {
        auto it = g->groups.begin();
        std::advance(it, i);
        g->groups.erase(it);
      } else {
        auto it = g->datasets.begin();
        std::advance(it, i - g->groups.size());
        g->datasets.erase(it);
      }
      break;
    }
    case 7: {  // add or copy a group under a table name
      Group* parent = pick(n.groups, in);
      Group* source = pick(n.groups, in);
      const std::string& name = member_name_table()[in.read<uint8_t>() % member_name_table().size()];
      const bool copy = in.read<uint8_t>() % 2 == 0;
      // Copy first: `source` may be an ancestor of `parent`. Cap the tree's size.
      if (!parent->datasets.count(name) && n.attrs.size() < 64) {
        Group added = copy ? *source : Group{};
        parent->groups[name] = std::move(added);
      }
      break;
    }
    case 8: {  // rename a dataset
      Group* g = pick(n.groups, in);
      const uint8_t which = in.read<uint8_t>();
      const std::string& name = member_name_table()[in.read<uint8_t>() % member_name_table().size()];
      if (g->datasets.empty() || g->datasets.count(name) || g->groups.count(name)) break;
      auto it = g->datasets.begin();
      std::advance(it, which % g->datasets.size());
      Dataset moved = it->second;
      g->datasets.erase(it);
      g->datasets[name] = moved;
      break;
    }
    default: {  // fill a dataset with one byte (0xFF: NaN codes; 0x7F: e4m3fn NaN)
      Dataset* ds = pick(n.datasets, in);
      const uint8_t value = in.read<uint8_t>();
      if (ds != nullptr) ds->bytes.assign(ds->bytes.size(), value);
      break;
    }
  }
}

}  // namespace

// libhdf5 1.10.8 leaks on some error paths (see fuzz_hdf5_fixture.cc); not ours.
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5\n"; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dsaf::fuzz::ScratchFile scratch(".h5");
  static dsaf::fuzz::ScratchFile copy(".h5");
  ByteReader in(data, size);
  Group root = base_tree(in.read<uint8_t>());
  for (int i = 0; i < kMaxEdits && !in.done(); ++i) apply_edit(root, in);

  // Write the edited tree. A tree libhdf5 cannot write (it refuses a few shapes of
  // attribute) is not an input of the loader; skip it.
  try {
    h5::File file = h5::File::create(scratch.path());
    write_group(file.root(), root);
    file.close();
  } catch (const dsaf::Error&) {
    return 0;
  }

  dsaf::fixtures::Fixture fixture;
  try {
    fixture = dsaf::fixtures::open_fixture(scratch.path());
  } catch (const dsaf::Error&) {
    return 0;
  }
  dsaf::fuzz::check_accepted_fixture(fixture, copy);
  return 0;
}
