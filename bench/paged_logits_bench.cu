// Paged decode logits on the GPU at the issue's shape — batch 32, one query each, 64 heads,
// 128K context, page size 64, fp8 queries — with fp8 (132 B/token) and bf16 (256 B/token)
// caches: the exact-order kernel (device/paged_logits.cu) and the tensor-core kernel
// (device/paged_logits_mma.cu: "fp8-mma" on the fp8 cache, "bf16-mma" on the bf16 cache),
// against the device-to-device copy bandwidth. Bytes counted: cache bytes read + q +
// weights + page tables + logits written.
// Usage: paged_logits_bench OUT.json
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/gpu_timing.h"
#include "device/api.h"

namespace {

using namespace dsaf;

constexpr int kBatch = 32, kHeads = 64, kPage = 64;
constexpr int64_t kContext = 131072;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
    return 2;
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbps = bench::copy_bandwidth_gbps();

  std::mt19937 rng(7);
  const int64_t pages_per_seq = kContext / kPage, pages = kBatch * pages_per_seq;
  std::vector<int32_t> tables(pages);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  std::vector<int32_t> context_lens(kBatch, static_cast<int32_t>(kContext));
  // e4m3 codes without the NaN codes 0x7F / 0xFF; positive fp32 scales; weights ~ N(0,1).
  std::uniform_int_distribution<int> byte(0, 255);
  const auto fp8_code = [&] { int c = byte(rng); return static_cast<uint8_t>((c & 0x7F) == 0x7F ? c - 1 : c); };
  std::vector<uint8_t> q(static_cast<size_t>(kBatch) * kHeads * 128);
  for (auto& c : q) c = fp8_code();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> weights(kBatch * kHeads);
  for (float& w : weights) w = normal(rng);

  std::string json = "{\n  \"gpu\": \"" + std::string(prop.name) + "\",\n  \"shape\": \"batch 32, next_n 1, 64 heads, "
                     "context 131072, page 64\",\n  \"copy_bandwidth_gbps\": " + std::to_string(copy_gbps) +
                     ",\n  \"bytes_counted\": \"cache read + q + weights + page tables + fp32 logits written\",\n  \"cases\": [";
  bool first = true;
  for (const ref::StorageFormat format : {ref::StorageFormat::kFp8E4m3fn, ref::StorageFormat::kBf16}) {
    const bool fp8 = format == ref::StorageFormat::kFp8E4m3fn;
    const int token_bytes = fp8 ? 132 : 256;
    std::vector<uint8_t> cache(static_cast<size_t>(pages) * kPage * token_bytes);
    for (int64_t p = 0; p < pages; ++p) {
      uint8_t* page = cache.data() + p * kPage * token_bytes;
      if (fp8) {
        for (int i = 0; i < kPage * 128; ++i) page[i] = fp8_code();
        for (int t = 0; t < kPage; ++t) {
          const float scale = 0.01f * (1.0f + static_cast<float>(byte(rng)) / 256.0f);
          std::memcpy(page + kPage * 128 + 4 * t, &scale, 4);
        }
      } else {
        auto* v = reinterpret_cast<uint16_t*>(page);
        for (int i = 0; i < kPage * 128; ++i) v[i] = static_cast<uint16_t>(0x3C00 + (byte(rng) << 2) - 512);  // |x| in [2^-11, 2^-3)
      }
    }
    bench::DeviceArray<uint8_t> d_cache(cache), d_q(q);
    bench::DeviceArray<float> d_w(weights);
    const dev::LogitRows rows = dev::decode_rows(context_lens, 1);
    bench::DeviceArray<int32_t> d_tables(tables), d_row_seq(rows.seq), d_row_valid(rows.valid);
    bench::DeviceArray<float> d_logits(static_cast<size_t>(kBatch) * kContext);
    dev::PagedLogitsArgs a;
    a.q_values = d_q.get();
    a.q_scales = d_q.get();  // fp8 q: the scale is folded into the weights; not read
    a.weights = d_w.get();
    a.q_format = ref::StorageFormat::kFp8E4m3fn;
    a.k_format = format;
    a.rows = kBatch;
    a.num_heads = kHeads;
    a.row_seq = d_row_seq.get();
    a.row_valid = d_row_valid.get();
    a.cache = d_cache.get();
    a.page_size = kPage;
    a.page_tables = d_tables.get();
    a.page_table_stride = pages_per_seq;
    a.max_context = kContext;
    a.logits = d_logits.get();
    const double bytes = static_cast<double>(cache.size()) + q.size() + weights.size() * 4.0 + tables.size() * 4.0 +
                         kBatch * kContext * 4.0;
    const auto record = [&](const char* kernel, float ms) {
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      char row[512];
      std::snprintf(row, sizeof row,
                    "%s\n    {\"cache\": \"%s\", \"kernel\": \"%s\", \"ms\": %.4f, \"bytes\": %.0f, \"gbps\": %.1f, "
                    "\"fraction_of_copy\": %.3f}",
                    first ? "" : ",", fp8 ? "fp8" : "bf16", kernel, ms, bytes, gbps, gbps / copy_gbps);
      json += row;
      first = false;
      std::printf("%-5s cache  %-12s %.3f ms (%.0f GB/s, %.0f%% of copy)\n", fp8 ? "fp8" : "bf16", kernel, ms, gbps,
                  100 * gbps / copy_gbps);
    };
    record("exact-order", bench::median_ms([&] { dev::launch_paged_logits(a); }));
    record(fp8 ? "fp8-mma" : "bf16-mma", bench::median_ms([&] { dev::launch_paged_logits_fast(a); }));
  }
  json += "\n  ]\n}\n";
  std::printf("copy bandwidth %.0f GB/s\n", copy_gbps);
  return bench::write_file(argv[1], json) ? 0 : 2;
}
