// File: tiny_fixture.h
// Small but valid schema-1 fixtures (fixtures/SCHEMA.md) for the fixture fuzz targets and
// their seeds: a tiny model (hidden 8, q_lora 4, 2 heads of dim 4), so that the HDF5 files
// stay a few KB. kind: "checkpoint_slice" (layer 3: fp8 wq_b with fp32 block scales, bf16
// wk and weights_proj, f32 k_norm) or "activation_capture" (layer 3: positions, x, qr, a
// bf16 paged index-K cache of 2 pages and its page table).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fixtures/fixture.h"
#include "fuzz/byte_reader.h"
#include "reference/numeric/minifloat.h"

namespace dsaf::fuzz {

inline dsaf::fixtures::FixtureTensor tiny_tensor(dsaf::fixtures::TensorDtype dtype, std::vector<int64_t> shape,
                                                 std::vector<uint8_t> bytes) {
  dsaf::fixtures::FixtureTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.source = "synthetic:fuzz seed";
  t.bytes = std::move(bytes);
  return t;
}

inline std::vector<uint8_t> ramp_bf16_bytes(size_t count) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < count; ++i) append_le(out, dsaf::ref::encode_bf16(0.25f * static_cast<float>(i % 7) - 0.5f));
  return out;
}

inline dsaf::fixtures::Fixture tiny_fixture(const std::string& kind) {
  using dsaf::fixtures::TensorDtype;
  dsaf::fixtures::Fixture f;
  f.kind = kind;
  f.model = {"deepseek_v32", 8, 4, 2, 4, 2, 4, 10000.0, ""};
  f.synthetic = true;
  f.synthetic_label = "fuzz seed: small ramp values";
  f.generator = "fuzz_make_seeds";
  if (kind == "checkpoint_slice") {
    auto& indexer = f.layers[3].indexer;
    indexer["wq_b.weight"] = tiny_tensor(TensorDtype::kF8E4m3fn, {8, 4}, std::vector<uint8_t>(32, 0x38));
    indexer["wq_b.weight"].quant_block = std::array<int64_t, 2>{4, 4};
    indexer["wq_b.weight"].scale_fmt = "fp32";
    indexer["wq_b.scale"] = tiny_tensor(TensorDtype::kF32, {2, 1}, f32_bytes({0.5f, 0.25f}));
    indexer["wq_b.scale"].quant_block = std::array<int64_t, 2>{4, 4};
    indexer["wq_b.scale"].scale_fmt = "fp32";
    indexer["wk.weight"] = tiny_tensor(TensorDtype::kBf16, {4, 8}, ramp_bf16_bytes(32));
    indexer["weights_proj.weight"] = tiny_tensor(TensorDtype::kBf16, {2, 8}, ramp_bf16_bytes(16));
    indexer["k_norm.weight"] = tiny_tensor(TensorDtype::kF32, {4}, f32_bytes({1, 1, 1, 1}));
    indexer["k_norm.bias"] = tiny_tensor(TensorDtype::kF32, {4}, f32_bytes({0, 0, 0, 0}));
  } else {
    auto& acts = f.activations[3].tensors;
    std::vector<uint8_t> positions;
    for (int32_t p : {0, 1, 2}) append_le(positions, p);
    acts["positions"] = tiny_tensor(TensorDtype::kI32, {3}, positions);
    acts["x"] = tiny_tensor(TensorDtype::kBf16, {3, 8}, ramp_bf16_bytes(24));
    acts["qr"] = tiny_tensor(TensorDtype::kF32, {3, 4}, f32_bytes(std::vector<float>(12, 0.5f)));
    acts["index_k_cache"] = tiny_tensor(TensorDtype::kU8, {2, 256}, std::vector<uint8_t>(512, 0));
    acts["index_k_cache"].layout = dsaf::fixtures::kPagedIndexK;
    acts["index_k_cache"].page_size = 1;
    acts["index_k_cache"].key_format = "bf16";
    acts["index_k_cache"].recipe = "sglang-v4-bf16";
    std::vector<uint8_t> table;
    for (int32_t p : {1, 0}) append_le(table, p);
    acts["page_table"] = tiny_tensor(TensorDtype::kI32, {2}, table);
  }
  return f;
}

}  // namespace dsaf::fuzz
