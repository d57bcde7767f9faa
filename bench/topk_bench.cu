// Top-K benchmark on the GPU: top-2048 of 131,072 fp32 scores x 32 rows (the DSA decode
// shape, docs/verification.md §4) with the exact kernel (device/topk.cu) at every
// blocks_per_row and by index (TopKOrder::kByIndex, automatic blocks), against a full per-row
// sort (CUB DeviceSegmentedSort, stable, descending) of the same data, and against the
// device-to-device copy bandwidth. bench/torch_topk.py times
// torch.topk on the same shape. Two inputs: Gaussian fp32 (few ties) and the same rounded
// to bf16 (ties at the threshold, as with bf16 logits). The kernel's indices are checked
// against the first 2048 of the stable sort (same order: score descending, ties by index).
// Bytes counted: the scores, read once (the kernel's second pass mostly hits L2).
// Usage: topk_bench OUT.json
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cub/device/device_segmented_sort.cuh>

#include "bench/gpu_timing.h"
#include "device/api.h"
#include "reference/numeric/minifloat.h"

namespace {

using namespace dsaf;

constexpr int kRows = 32;
constexpr int kLength = 131072;
constexpr int kK = 2048;
constexpr int64_t kScores = int64_t{kRows} * kLength;

template <class T>
std::vector<T> download(const T* d, size_t count) {
  std::vector<T> host(count);
  BENCH_CHECK(cudaMemcpy(host.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
    return 2;
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));

  const double copy_gbps = bench::copy_bandwidth_gbps();

  float *d_scores, *d_sorted_keys;
  int32_t *d_indices, *d_status, *d_iota, *d_sorted_values, *d_offsets;
  BENCH_CHECK(cudaMalloc(&d_scores, kScores * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&d_sorted_keys, kScores * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&d_indices, kRows * kK * sizeof(int32_t)));
  BENCH_CHECK(cudaMalloc(&d_status, kRows * sizeof(int32_t)));
  BENCH_CHECK(cudaMalloc(&d_iota, kScores * sizeof(int32_t)));
  BENCH_CHECK(cudaMalloc(&d_sorted_values, kScores * sizeof(int32_t)));
  BENCH_CHECK(cudaMalloc(&d_offsets, (kRows + 1) * sizeof(int32_t)));
  std::vector<int32_t> iota(kScores), offsets(kRows + 1);
  for (int64_t i = 0; i < kScores; ++i) iota[i] = static_cast<int32_t>(i % kLength);
  for (int r = 0; r <= kRows; ++r) offsets[r] = r * kLength;
  BENCH_CHECK(cudaMemcpy(d_iota, iota.data(), kScores * sizeof(int32_t), cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d_offsets, offsets.data(), (kRows + 1) * sizeof(int32_t), cudaMemcpyHostToDevice));

  // CUB's scratch for the full sort (sized once: the same shape for both inputs).
  size_t cub_bytes = 0;
  BENCH_CHECK(cub::DeviceSegmentedSort::StableSortPairsDescending(nullptr, cub_bytes, d_scores, d_sorted_keys, d_iota,
                                                            d_sorted_values, static_cast<int>(kScores), kRows,
                                                            d_offsets, d_offsets + 1));
  void* d_cub = nullptr;
  BENCH_CHECK(cudaMalloc(&d_cub, cub_bytes));
  const auto cub_sort = [&] {
    BENCH_CHECK(cub::DeviceSegmentedSort::StableSortPairsDescending(d_cub, cub_bytes, d_scores, d_sorted_keys, d_iota,
                                                              d_sorted_values, static_cast<int>(kScores), kRows,
                                                              d_offsets, d_offsets + 1));
  };

  dev::TopKArgs args;
  args.scores = d_scores;
  args.row_stride = kLength;
  args.rows = kRows;
  args.valid_lengths = nullptr;  // every position valid
  args.k = kK;
  args.indices = d_indices;
  args.row_status = d_status;  // asynchronous: no host round trip inside the timing

  const double bytes = kScores * sizeof(float);
  std::string json = "{\n  \"gpu\": \"" + std::string(prop.name) + "\",\n  \"rows\": " + std::to_string(kRows) +
                     ",\n  \"row_length\": " + std::to_string(kLength) + ",\n  \"k\": " + std::to_string(kK) +
                     ",\n  \"copy_bandwidth_gbps\": " + std::to_string(copy_gbps) +
                     ",\n  \"bytes_counted\": \"fp32 scores read once\",\n  \"cases\": [";
  bool first_case = true, all_exact = true;
  for (const char* input : {"gaussian-fp32", "gaussian-bf16-values"}) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> scores(kScores);
    const bool bf16 = std::string(input) == "gaussian-bf16-values";
    for (float& x : scores) x = bf16 ? ref::round_bf16(normal(rng)) : normal(rng);
    BENCH_CHECK(cudaMemcpy(d_scores, scores.data(), kScores * sizeof(float), cudaMemcpyHostToDevice));

    // The full sort, and the reference order it gives (stable: ties by index).
    const float cub_ms = bench::median_ms(cub_sort);
    const std::vector<int32_t> sorted = download(d_sorted_values, kScores);

    std::string by_blocks;
    float auto_ms = 0.0f;
    bool matches = true, same_across_blocks = true;
    std::vector<int32_t> first_indices;
    for (int blocks : {dev::kTopKAutoBlocksPerRow, 1, 2, 4, 8}) {
      const float ms = bench::median_ms([&] { dev::launch_topk(args, blocks); });
      BENCH_CHECK(cudaDeviceSynchronize());
      const std::vector<int32_t> indices = download(d_indices, kRows * kK);
      const std::vector<int32_t> status = download(d_status, kRows);
      for (int r = 0; r < kRows; ++r) {
        matches = matches && status[r] == 0 &&
                  std::equal(indices.begin() + r * kK, indices.begin() + (r + 1) * kK, sorted.begin() + r * kLength);
      }
      if (first_indices.empty()) first_indices = indices;
      same_across_blocks = same_across_blocks && indices == first_indices;
      if (blocks == dev::kTopKAutoBlocksPerRow) auto_ms = ms;
      const std::string name = blocks == dev::kTopKAutoBlocksPerRow ? "auto" : std::to_string(blocks);
      by_blocks += (by_blocks.empty() ? "\"" : ", \"") + name + "\": " + std::to_string(ms);
      std::printf("%-22s blocks/row %-4s %.4f ms\n", input, name.c_str(), ms);
    }
    // The same positions in ascending order (TopKOrder::kByIndex: no final sort), checked
    // against the stable sort's first K, sorted by position.
    dev::TopKArgs by_index = args;
    by_index.order = dev::TopKOrder::kByIndex;
    const float by_index_ms = bench::median_ms([&] { dev::launch_topk(by_index); });
    BENCH_CHECK(cudaDeviceSynchronize());
    bool by_index_matches = true;
    {
      const std::vector<int32_t> indices = download(d_indices, kRows * kK);
      const std::vector<int32_t> status = download(d_status, kRows);
      for (int r = 0; r < kRows; ++r) {
        std::vector<int32_t> want(sorted.begin() + r * kLength, sorted.begin() + r * kLength + kK);
        std::sort(want.begin(), want.end());
        by_index_matches = by_index_matches && status[r] == 0 &&
                           std::equal(want.begin(), want.end(), indices.begin() + r * kK);
      }
    }
    std::printf("%-22s by index        %.4f ms\n", input, by_index_ms);
    // The synchronous launch (statuses copied back and checked on the host), as the verifier uses it.
    dev::TopKArgs checked = args;
    checked.row_status = nullptr;
    const float checked_ms = bench::median_ms([&] { dev::launch_topk(checked); });

    const double gbps = bytes / (auto_ms * 1e-3) / 1e9;
    char row[1024];
    std::snprintf(row, sizeof row,
                  "%s\n    {\"input\": \"%s\", \"topk_ms\": %.4f, \"topk_checked_ms\": %.4f, \"cub_full_sort_ms\": "
                  "%.4f, \"bytes\": %.0f, \"topk_gbps\": %.1f, \"fraction_of_copy\": %.3f, \"speedup_vs_cub_sort\": "
                  "%.2f, \"matches_stable_sort_prefix\": %s, \"same_bits_for_every_blocks_per_row\": %s, "
                  "\"topk_ms_by_blocks_per_row\": {%s}, \"topk_by_index_ms\": %.4f, \"by_index_matches\": %s}",
                  first_case ? "" : ",", input, auto_ms, checked_ms, cub_ms, bytes, gbps, gbps / copy_gbps,
                  cub_ms / auto_ms, matches ? "true" : "false", same_across_blocks ? "true" : "false",
                  by_blocks.c_str(), by_index_ms, by_index_matches ? "true" : "false");
    json += row;
    first_case = false;
    all_exact = all_exact && matches && same_across_blocks && by_index_matches;
    std::printf("%-22s top-K %.4f ms (%.0f GB/s, %.0f%% of copy), checked %.4f ms, CUB full sort %.4f ms (%.1fx); "
                "matches sort: %s, same for every blocks/row: %s\n",
                input, auto_ms, gbps, 100 * gbps / copy_gbps, checked_ms, cub_ms, cub_ms / auto_ms,
                matches ? "yes" : "NO", same_across_blocks ? "yes" : "NO");
  }
  json += "\n  ]\n}\n";
  std::printf("copy bandwidth %.0f GB/s\n", copy_gbps);
  for (void* p : {static_cast<void*>(d_scores), static_cast<void*>(d_sorted_keys), static_cast<void*>(d_indices),
                  static_cast<void*>(d_status), static_cast<void*>(d_iota), static_cast<void*>(d_sorted_values),
                  static_cast<void*>(d_offsets), d_cub}) {
    BENCH_CHECK(cudaFree(p));
  }
  if (!bench::write_file(argv[1], json)) return 2;
  return all_exact ? 0 : 1;
}
