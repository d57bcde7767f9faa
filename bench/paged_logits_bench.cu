// Paged logits on the GPU, 64 heads, 128K context, page size 64, fp8 queries, fp8 (132
// B/token) and bf16 (256 B/token) caches, in two shapes (kShapes: decode, 32 sequences x 1
// query; one sequence x 64 queries): the exact-order kernel (device/paged_logits.cu,
// decode only) and the tensor-core kernel (device/paged_logits_mma.cu: "fp8-mma" on the
// fp8 cache, "bf16-mma" on the bf16 cache; "-4rows": four rows a block), against the
// roofline: the device-to-device copy bandwidth and the arithmetic peak of the unit the
// kernel runs on (dev::compute_peaks). Bytes counted: cache bytes read once + q + weights
// + page tables + logits written; flops: 2 x heads x 128 per row and key scored.
// Usage: paged_logits_bench OUT.json
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/gpu_timing.h"
#include "device/api.h"

namespace {

using namespace dsaf;

constexpr int kHeads = 64, kPage = 64;
constexpr int64_t kContext = 131072;

// The two shapes: decode (32 sequences, a query each: every row reads its own cache, the
// memory-bound case) and one sequence with 64 queries at its end (a prefill chunk, or a
// study's queries: 64 rows share one cache, and the arithmetic, 2 x 64 heads x 128 per row
// and key, outgrows the traffic).
struct Shape {
  const char* name;
  int sequences, rows_per_sequence;
};
constexpr Shape kShapes[] = {{"decode", 32, 1}, {"one sequence", 1, 64}};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
    return 2;
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbps = bench::copy_bandwidth_gbps();
  const dev::ComputePeaks peaks = dev::compute_peaks();

  std::mt19937 rng(7);
  // e4m3 codes without the NaN codes 0x7F / 0xFF; positive fp32 scales; weights ~ N(0,1).
  std::uniform_int_distribution<int> byte(0, 255);
  const auto fp8_code = [&] { int c = byte(rng); return static_cast<uint8_t>((c & 0x7F) == 0x7F ? c - 1 : c); };
  std::normal_distribution<float> normal(0.0f, 1.0f);

  std::string json = "{\n  \"gpu\": \"" + std::string(prop.name) + "\",\n  \"heads\": 64, \"context\": 131072, "
                     "\"page\": 64,\n  \"copy_bandwidth_gbps\": " + std::to_string(copy_gbps) +
                     ",\n  \"peak_tflops\": {\"tensor_fp8\": " + std::to_string(peaks.tensor_fp8_tflops) +
                     ", \"tensor_bf16\": " + std::to_string(peaks.tensor_bf16_tflops) +
                     ", \"fp32_fma\": " + std::to_string(peaks.fp32_tflops) +
                     "},\n  \"bytes_counted\": \"cache read once + q + weights + page tables + fp32 logits written\","
                     "\n  \"flops_counted\": \"2 x heads x 128 per row and key scored\",\n  \"cases\": [";
  bool first = true;
  for (const Shape& shape : kShapes) {
    const int batch = shape.sequences, rows_count = shape.sequences * shape.rows_per_sequence;
    const int64_t pages_per_seq = kContext / kPage, pages = batch * pages_per_seq;
    std::vector<int32_t> tables(pages);
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), rng);
    const dev::LogitRows rows =
        dev::decode_rows(std::vector<int32_t>(batch, static_cast<int32_t>(kContext)), shape.rows_per_sequence);
    std::vector<uint8_t> q(static_cast<size_t>(rows_count) * kHeads * 128);
    for (auto& c : q) c = fp8_code();
    std::vector<float> weights(static_cast<size_t>(rows_count) * kHeads);
    for (float& w : weights) w = normal(rng);
    double keys_scored = 0.0;
    for (int32_t v : rows.valid) keys_scored += v;
    const double flops = 2.0 * kHeads * 128 * keys_scored;
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
      bench::DeviceArray<int32_t> d_tables(tables), d_row_seq(rows.seq), d_row_valid(rows.valid);
      bench::DeviceArray<float> d_logits(static_cast<size_t>(rows_count) * kContext);
      dev::PagedLogitsArgs a;
      a.q_values = d_q.get();
      a.q_scales = d_q.get();  // fp8 q: the scale is folded into the weights; not read
      a.weights = d_w.get();
      a.q_format = ref::StorageFormat::kFp8E4m3fn;
      a.k_format = format;
      a.rows = rows_count;
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
                           rows_count * kContext * 4.0;
      const auto record = [&](const char* kernel, double peak_tflops, float ms) {
        const double gbps = bytes / (ms * 1e-3) / 1e9, tflops = flops / (ms * 1e-3) / 1e12;
        const double memory_ms = bytes / (copy_gbps * 1e6), compute_ms = peak_tflops > 0 ? flops / (peak_tflops * 1e9) : 0.0;
        const double floor_ms = std::max(memory_ms, compute_ms);
        char row[768];
        std::snprintf(row, sizeof row,
                      "%s\n    {\"shape\": \"%s\", \"rows\": %d, \"cache\": \"%s\", \"kernel\": \"%s\", \"ms\": %.4f, "
                      "\"bytes\": %.0f, \"gbps\": %.1f, \"fraction_of_copy\": %.3f, \"flops\": %.4g, \"tflops\": %.1f, "
                      "\"peak_tflops\": %.1f, \"bound\": \"%s\", \"fraction_of_roofline\": %.3f}",
                      first ? "" : ",", shape.name, rows_count, fp8 ? "fp8" : "bf16", kernel, ms, bytes, gbps,
                      gbps / copy_gbps, flops, tflops, peak_tflops, compute_ms > memory_ms ? "compute" : "memory",
                      floor_ms / ms);
        json += row;
        first = false;
        std::printf("%-12s %-5s cache  %-14s %.4f ms (%.0f GB/s, %.0f%% of copy; %.0f TFLOP/s; %.0f%% of the %s "
                    "roofline)\n",
                    shape.name, fp8 ? "fp8" : "bf16", kernel, ms, gbps, 100 * gbps / copy_gbps, tflops,
                    100 * floor_ms / ms, compute_ms > memory_ms ? "compute" : "memory");
      };
      const double tensor_peak = fp8 ? peaks.tensor_fp8_tflops : peaks.tensor_bf16_tflops;
      if (shape.rows_per_sequence == 1) {  // the exact-order kernel reads a row's keys once a row
        record("exact-order", peaks.fp32_tflops, bench::median_ms([&] { dev::launch_paged_logits(a); }));
      }
      a.shared_row_run = 1;
      record(fp8 ? "fp8-mma" : "bf16-mma", tensor_peak, bench::median_ms([&] { dev::launch_paged_logits_fast(a); }));
      if (shape.rows_per_sequence >= 4) {
        a.shared_row_run = shape.rows_per_sequence;
        record(fp8 ? "fp8-mma-4rows" : "bf16-mma-4rows", tensor_peak,
               bench::median_ms([&] { dev::launch_paged_logits_fast(a); }));
      }
    }
  }
  json += "\n  ]\n}\n";
  std::printf("copy bandwidth %.0f GB/s; peaks fp8 / bf16 tensor %.0f / %.0f TFLOP/s, fp32 FMA %.0f (%d SMs at %.2f GHz)\n",
              copy_gbps, peaks.tensor_fp8_tflops, peaks.tensor_bf16_tflops, peaks.fp32_tflops, peaks.sms, peaks.clock_ghz);
  return bench::write_file(argv[1], json) ? 0 : 2;
}
