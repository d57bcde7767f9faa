// The sglang-v4-* presets against the SGLang-style test kernel (compiled with SGLang's
// flags: -O3, contraction on, hardware rsqrtf), byte for byte, on >= 100,000 tokens per
// store format including edge rows, random page tables and page sizes 1..256.
#include <cstring>

#include "oracle/verdict.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/rope.h"
#include "tests/device/gpu_test_support.h"
#include "tests/device/sglang_v4_style_kernel.cuh"

namespace dsaf::test {
namespace {

using ref::kHeadDim;

struct Case {
  const char* preset;
  SglangStore store;
};

class SglangStyleGpu : public ::testing::TestWithParam<Case> {};

TEST_P(SglangStyleGpu, PresetIsByteExactAgainstTheSglangCompiledKernel) {
  DSAF_REQUIRE_GPU();
  const ref::Recipe& recipe = ref::preset(GetParam().preset);
  std::mt19937 rng(std::hash<std::string>{}(recipe.name) + 7);
  const int kPositions = 65536;
  const ref::RopeTable rope(recipe.rope.table, kPositions);
  std::vector<float> freqs(static_cast<size_t>(kPositions) * 64);
  for (int p = 0; p < kPositions; ++p) {
    for (int i = 0; i < 32; ++i) {
      freqs[p * 64 + 2 * i] = rope.cos(p)[i];
      freqs[p * 64 + 2 * i + 1] = rope.sin(p)[i];
    }
  }
  DeviceBuffer<float> d_freqs(freqs);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> weight(kHeadDim);
  for (float& w : weight) w = 1.0f + 0.2f * normal(rng);
  DeviceBuffer<float> d_weight(weight);

  int64_t total = 0;
  for (int page_bits = 0; page_bits <= 8; ++page_bits) {
    const int P = 1 << page_bits;
    const int64_t T = 12000;  // 9 page sizes x 12,000 = 108,000 tokens
    const int64_t pages = (T + P - 1) / P + 3;
    std::vector<int32_t> table(pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    table.resize((T + P - 1) / P);
    std::vector<float> input(T * kHeadDim);
    std::vector<int32_t> positions(T);
    std::vector<int64_t> slots(T);
    for (int64_t t = 0; t < T; ++t) {
      random_row(rng, input.data() + t * kHeadDim);
      positions[t] = std::uniform_int_distribution<int>(0, kPositions - 1)(rng);
      slots[t] = (static_cast<int64_t>(table[t / P]) << page_bits) | (t % P);
    }
    if (page_bits % 2 == 0) to_bf16_bits(input);  // bf16-valued inputs half the time

    const ref::PagedCacheLayout layout(recipe.key_quant.format, P);
    std::vector<uint8_t> expected(pages * layout.page_bytes(), 0xAA);
    const ref::NormParams norm{weight.data(), nullptr};
    for (int64_t t = 0; t < T; ++t) {
      const ref::StoredHead head = ref::run_key_path(recipe, input.data() + t * kHeadDim, positions[t], norm, rope);
      layout.store(expected, layout.locate(table, t, pages), head);
    }
    DeviceBuffer<float> d_input(input);
    DeviceBuffer<int32_t> d_pos(positions);
    DeviceBuffer<int64_t> d_slots(slots);
    DeviceBuffer<uint8_t> d_cache(std::vector<uint8_t>(expected.size(), 0xAA));
    SglangStyleArgs args{d_input.get(), d_pos.get(), d_slots.get(), d_freqs.get(), d_weight.get(),
                         recipe.key_norm.eps, d_cache.get(), page_bits, T};
    launch_sglang_style(GetParam().store, args);
    cuda_ok(cudaGetLastError(), "sglang_style launch");
    const std::vector<uint8_t> actual = d_cache.download();
    const oracle::ByteVerdict v = oracle::compare_paged_cache(layout, {{table}, {T}}, expected, actual);
    ASSERT_TRUE(v.pass) << recipe.name << ", page size " << P << ":\n" << v.describe();
    total += T;
  }
  std::printf("[ %s ] %lld tokens byte-exact against the SGLang-style kernel\n", recipe.name.c_str(),
              static_cast<long long>(total));
  EXPECT_GE(total, 100000);
}

INSTANTIATE_TEST_SUITE_P(Presets, SglangStyleGpu,
                         ::testing::Values(Case{"sglang-v4-fp8", SglangStore::kFp8},
                                           Case{"sglang-v4-bf16", SglangStore::kBf16},
                                           Case{"sglang-v4-fp4", SglangStore::kFp4}),
                         [](const auto& info) {
                           std::string name = info.param.preset;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace dsaf::test
