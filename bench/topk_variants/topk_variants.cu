// File: topk_variants.cu — compares versions of the exact top-K kernel (device/topk/
// select.cuh) in one process: each version is device/topk/topk.cu compiled with its own
// select.cuh (build.sh), and this driver runs every version on the same rows at each
// blocks_per_row, times it (CUDA events, median of 25 launches, asynchronous statuses) and
// compares its indices with the first version's. The kernel's contract is exact: every
// version must print 0 differing indices and every row status kOk.
//
// Shapes: [32 x 131072] (DSA decode) with Gaussian scores at K = 512 and 2048 and with the
// same scores rounded to bf16 (ties at the threshold) at K = 2048; [16 x 131072]; [64 x
// 131072] with valid lengths spread over [N/2, N] (a sweep's query rows); [64 x 65536]
// (the grid path at two blocks a row); [1 x 1,048,576]
// at K = 2048 and 512. Each at the cluster widths and grid widths ("gG", kTopKGrid + G)
// listed; the first entry's output is the one compared with.
// $TOPK_VARIANTS_ONLY=PREFIX runs only the shapes whose name starts with PREFIX.
// $TOPK_VARIANTS_BY_INDEX=1 also runs every version with TopKOrder::kByIndex, compared with
// the first version's output by score, each row's positions sorted ascending (a version
// from before the order existed ignores it and shows as differing).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/gpu_timing.h"
#include "device/api.h"

#ifndef TOPK_VARIANTS
#error "build.sh defines TOPK_VARIANTS as V(name) V(name) ..."
#endif

namespace dsaf::dev {
#define V(name) void launch_topk_##name(const TopKArgs&, int);
TOPK_VARIANTS
#undef V
}  // namespace dsaf::dev

namespace {

using Launch = void (*)(const dsaf::dev::TopKArgs&, int);

struct Shape {
  const char* name;
  int rows;
  int length;
  int k;
  bool bf16_values;  // scores rounded to bf16: ties at the threshold
  bool spread;       // valid lengths spread over [length / 2, length]
  std::vector<int> blocks;
};

}  // namespace

int main() {
  using dsaf::bench::DeviceArray;
  std::vector<std::pair<std::string, Launch>> versions;
#define V(name) versions.emplace_back(#name, &dsaf::dev::launch_topk_##name);
  TOPK_VARIANTS
#undef V
  const char* only = std::getenv("TOPK_VARIANTS_ONLY");
  constexpr int G = dsaf::dev::kTopKGrid;  // G + g: the grid path, g blocks a row
  const Shape shapes[] = {{"32x128K K2048", 32, 131072, 2048, false, false, {2, 0, 4, G + 4}},
                          {"32x128K K512", 32, 131072, 512, false, false, {2, 0, G + 4}},
                          {"32x128K bf16 K2048", 32, 131072, 2048, true, false, {2, 0, G + 4}},
                          {"16x128K K2048", 16, 131072, 2048, false, false, {2, 0, G + 4, G + 8}},
                          {"64x128K spread K2048", 64, 131072, 2048, false, true, {2, 0}},
                          {"64x64K K2048", 64, 65536, 2048, false, false, {0, G + 2}},
                          {"1x1M K2048", 1, 1 << 20, 2048, false, false, {8, 0, G + 32, G + 64, G + 128}},
                          {"1x1M K512", 1, 1 << 20, 512, false, false, {8, 0, G + 128}}};
  std::mt19937 rng(1);
  for (const Shape& shape : shapes) {
    if (only != nullptr && std::strncmp(only, shape.name, std::strlen(only)) != 0) continue;
    const size_t scores = static_cast<size_t>(shape.rows) * shape.length;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> host(scores);
    for (float& s : host) {
      s = normal(rng);
      if (shape.bf16_values) {
        uint32_t bits;
        std::memcpy(&bits, &s, 4);
        bits &= 0xFFFF0000u;
        std::memcpy(&s, &bits, 4);
      }
    }
    std::vector<int32_t> lengths(shape.rows, shape.length);
    if (shape.spread) {
      for (int r = 0; r < shape.rows; ++r) {
        lengths[r] = shape.length / 2 + static_cast<int>(int64_t{r} * (shape.length / 2) / (shape.rows - 1));
      }
    }
    const DeviceArray<float> d_scores(host);
    const DeviceArray<int32_t> d_lengths(lengths), d_indices(static_cast<size_t>(shape.rows) * shape.k),
        d_status(shape.rows);
    dsaf::dev::TopKArgs a;
    a.scores = d_scores.get();
    a.row_stride = shape.length;
    a.rows = shape.rows;
    a.valid_lengths = d_lengths.get();
    a.k = shape.k;
    a.indices = d_indices.get();
    a.row_status = d_status.get();
    const size_t out = static_cast<size_t>(shape.rows) * shape.k;
    std::vector<int32_t> first(out), first_by_index(out), got(out), status(shape.rows);
    const bool by_index_too = std::getenv("TOPK_VARIANTS_BY_INDEX") != nullptr;
    for (int pass = 0; pass < (by_index_too ? 2 : 1); ++pass) {
      a.order = pass == 0 ? dsaf::dev::TopKOrder::kByScore : dsaf::dev::TopKOrder::kByIndex;
      if (pass == 1) {  // the first version's rows by score, each row's positions ascending
        first_by_index = first;
        for (int r = 0; r < shape.rows; ++r) {
          int32_t* row = first_by_index.data() + static_cast<size_t>(r) * shape.k;
          std::sort(row, std::find(row, row + shape.k, -1));
        }
      }
      const std::vector<int32_t>& expected = pass == 0 ? first : first_by_index;
      for (int blocks : shape.blocks) {
        for (size_t v = 0; v < versions.size(); ++v) {
          const bool is_first = pass == 0 && v == 0 && blocks == shape.blocks[0];
          BENCH_CHECK(cudaMemset(a.indices, 0x55, out * 4));
          BENCH_CHECK(cudaMemset(a.row_status, 0x55, shape.rows * 4));
          versions[v].second(a, blocks);
          BENCH_CHECK(cudaDeviceSynchronize());
          BENCH_CHECK(cudaMemcpy(is_first ? first.data() : got.data(), a.indices, out * 4, cudaMemcpyDeviceToHost));
          BENCH_CHECK(cudaMemcpy(status.data(), a.row_status, shape.rows * 4, cudaMemcpyDeviceToHost));
          size_t differing = 0, bad_rows = 0;
          if (!is_first) {
            for (size_t i = 0; i < out; ++i) differing += expected[i] != got[i];
          }
          for (int32_t s : status) bad_rows += s != 0;
          const float ms = dsaf::bench::median_ms([&] { versions[v].second(a, blocks); }, 25);
          const std::string label = blocks == 0 ? "auto"
                                    : blocks > G ? "g" + std::to_string(blocks - G)
                                                 : std::to_string(blocks);
          std::printf("%-22s %-8s blocks %-4s %-10s %8.2f us  indices differing from %s: %zu  rows not ok: %zu\n",
                      shape.name, pass == 0 ? "by-score" : "by-index", label.c_str(), versions[v].first.c_str(),
                      ms * 1000.0f, versions[0].first.c_str(), differing, bad_rows);
        }
      }
    }
  }
  return 0;
}
