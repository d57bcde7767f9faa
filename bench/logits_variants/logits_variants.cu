// File: logits_variants.cu — compares versions of the tensor-core paged logits kernel
// (device/paged_logits_mma.cu) in one process: each version is the kernel's source file
// compiled on its own with its launcher renamed (build.sh), and this driver runs every
// version on the same inputs, times it (CUDA events, median of 25 launches) and compares
// its logits with the first version's byte for byte. A change meant to keep the kernel's
// bits (a different schedule, order of independent instructions, occupancy) must print
// 0 differing bytes on every shape; its speed is judged on the same device minutes apart.
//
// Shapes (128K keys, 64 heads, page 64, pages in a random order):
//   sweep  64 rows of one sequence, valid lengths spread evenly over [N/2, N] (the
//          sweep's query positions: four rows a block, rows of unequal length)
//   study  64 rows of one sequence, valid lengths N - [0, 3000) (four rows a block)
//   decode 32 rows, one sequence each (one row a block; memory-bound)
//   decode-spread  the same, valid lengths spread over [N/2, N] (a decode batch's contexts)
//   mixed  64 rows of two sequences in runs of two, spread over [N/2, N], four rows a block
//          (every block's group takes a pass per sequence)
//   decode-as-4  decode's rows four a block (four passes a group): what ignoring the hint costs
// each with an fp8 cache (e4m3 codes without NaN, power-of-two-ish scales) and a bf16 one
// (bf16 queries; "bf16-q8": e4m3 queries the kernel widens, the sglang-v4-bf16 recipe).
// For the one-sequence shapes the last version is also timed the way the ABI entry point
// calls it (no row-run hint: the launcher routes on the device, both instances launched)
// and as a lone launch after 200 ms of an idle device. $LOGITS_VARIANTS_ONLY=PREFIX runs
// only the shapes whose name starts with PREFIX; $LOGITS_VARIANTS_OFFSET_KB=K moves the
// logits K KB into their allocation.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device/api.h"

#ifndef LOGITS_VARIANTS
#error "build.sh defines LOGITS_VARIANTS as V(name) V(name) ..."
#endif

namespace dsaf::dev {
#define V(name) void launch_##name(const PagedLogitsArgs&);
LOGITS_VARIANTS
#undef V
}  // namespace dsaf::dev

namespace {

using dsaf::dev::PagedLogitsArgs;
using Launch = void (*)(const PagedLogitsArgs&);

void check(cudaError_t status, int line) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "logits_variants: CUDA error '%s' at line %d\n", cudaGetErrorString(status), line);
    std::exit(1);
  }
}
#define CHECK(call) check((call), __LINE__)

constexpr int kContext = 131072, kPageSize = 64, kHeads = 64, kPagesPerSequence = kContext / kPageSize;

struct Shape {
  const char* name;
  bool fp8;
  int rows;
  int sequences;  // 1: every row reads one sequence; rows: one each; else runs of two rows
  bool spread;    // valid lengths spread over [N/2, N], else N - [0, 3000)
  int row_run;    // PagedLogitsArgs::shared_row_run (4: four rows a block)
  bool e4m3_queries = false;  // a bf16 cache's queries e4m3 (widened by the kernel), as sglang-v4-bf16's
};

// Median of `count` event timings of body(), in microseconds; before() runs outside them.
template <class Before, class Body>
double median_us(int count, Before before, Body body) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < count; ++i) {
    before();
    CHECK(cudaEventRecord(start, 0));
    body();
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    float m = 0.0f;
    CHECK(cudaEventElapsedTime(&m, start, stop));
    ms.push_back(m);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return 1e3 * ms[ms.size() / 2];
}

template <class T>
T* upload(const std::vector<T>& host) {
  T* device = nullptr;
  CHECK(cudaMalloc(&device, host.size() * sizeof(T)));
  CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

struct Inputs {
  std::vector<uint8_t> cache, queries;
  std::vector<int32_t> tables, row_seq, row_valid;
  std::vector<float> weights;
};

Inputs make_inputs(const Shape& shape, std::mt19937_64& rng) {
  // A pool of bf16 values of a unit normal; e4m3 codes uniform but for NaN (0x7f, 0xff).
  std::normal_distribution<float> normal;
  std::vector<uint16_t> bf16_pool(4096);
  for (uint16_t& b : bf16_pool) {
    const float f = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    b = static_cast<uint16_t>(bits >> 16);
  }
  const auto e4m3 = [&] {
    const uint8_t code = static_cast<uint8_t>(rng());
    return (code & 0x7f) == 0x7f ? static_cast<uint8_t>(code ^ 1) : code;
  };
  const auto fill_values = [&](uint8_t* p, size_t values, bool codes) {
    for (size_t i = 0; i < values; ++i) {
      if (codes) {
        p[i] = e4m3();
      } else {
        std::memcpy(p + 2 * i, &bf16_pool[rng() % bf16_pool.size()], 2);
      }
    }
  };
  Inputs in;
  const int row_bytes = shape.fp8 ? 132 : 256;  // fp8: 128 codes + an fp32 scale, after the page's codes
  const size_t pages = static_cast<size_t>(shape.sequences) * kPagesPerSequence;
  in.cache.resize(pages * kPageSize * row_bytes);
  for (size_t page = 0; page < pages; ++page) {
    uint8_t* p = in.cache.data() + page * kPageSize * row_bytes;
    fill_values(p, static_cast<size_t>(kPageSize) * 128, shape.fp8);
    if (shape.fp8) {
      for (int k = 0; k < kPageSize; ++k) {
        const float scale = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, -8 + static_cast<int>(rng() % 4));
        std::memcpy(p + kPageSize * 128 + 4 * k, &scale, 4);
      }
    }
  }
  in.tables.resize(pages);
  for (size_t i = 0; i < pages; ++i) in.tables[i] = static_cast<int32_t>(i);
  std::shuffle(in.tables.begin(), in.tables.end(), rng);
  const bool query_codes = shape.fp8 || shape.e4m3_queries;
  in.queries.resize(static_cast<size_t>(shape.rows) * kHeads * (query_codes ? 128 : 256));
  fill_values(in.queries.data(), static_cast<size_t>(shape.rows) * kHeads * 128, query_codes);
  in.weights.resize(static_cast<size_t>(shape.rows) * kHeads);
  for (float& w : in.weights) w = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 1000.0f;
  for (int r = 0; r < shape.rows; ++r) {
    in.row_seq.push_back(shape.sequences == 1 ? 0 : shape.sequences == shape.rows ? r : r / 2 % shape.sequences);
    in.row_valid.push_back(shape.spread ? kContext / 2 + static_cast<int>(int64_t{r} * (kContext / 2) / (shape.rows - 1))
                                        : kContext - static_cast<int>(rng() % 3000));
  }
  return in;
}

}  // namespace

int main() {
  std::vector<std::pair<std::string, Launch>> versions;
#define V(name) versions.emplace_back(#name, &dsaf::dev::launch_##name);
  LOGITS_VARIANTS
#undef V
  const char* only = std::getenv("LOGITS_VARIANTS_ONLY");
  const Shape shapes[] = {{"sweep fp8", true, 64, 1, true, 4},           {"sweep bf16", false, 64, 1, true, 4},
                          {"sweep bf16-q8", false, 64, 1, true, 4, true},
                          {"study fp8", true, 64, 1, false, 4},          {"study bf16", false, 64, 1, false, 4},
                          {"study bf16-q8", false, 64, 1, false, 4, true},
                          {"decode fp8", true, 32, 32, false, 1},        {"decode bf16", false, 32, 32, false, 1},
                          {"decode-spread fp8", true, 32, 32, true, 1},  {"decode-spread bf16", false, 32, 32, true, 1},
                          {"mixed fp8", true, 64, 2, true, 4},           {"mixed bf16", false, 64, 2, true, 4},
                          {"decode-as-4 fp8", true, 32, 32, false, 4},   {"decode-as-4 bf16", false, 32, 32, false, 4}};
  std::mt19937_64 rng(7);
  for (const Shape& shape : shapes) {
    if (only != nullptr && std::strncmp(only, shape.name, std::strlen(only)) != 0) continue;
    const Inputs in = make_inputs(shape, rng);
    const auto fmt = shape.fp8 ? dsaf::ref::StorageFormat::kFp8E4m3fn : dsaf::ref::StorageFormat::kBf16;
    PagedLogitsArgs a;
    a.q_values = upload(in.queries);
    a.weights = upload(in.weights);
    a.q_format = shape.e4m3_queries ? dsaf::ref::StorageFormat::kFp8E4m3fn : fmt;
    a.k_format = fmt;
    a.rows = shape.rows;
    a.num_heads = kHeads;
    a.row_seq = upload(in.row_seq);
    a.row_valid = upload(in.row_valid);
    a.cache = upload(in.cache);
    a.page_size = kPageSize;
    a.page_tables = upload(in.tables);
    a.page_table_stride = kPagesPerSequence;
    a.max_context = kContext;
    a.shared_row_run = shape.row_run;
    const size_t logits = static_cast<size_t>(shape.rows) * kContext;
    // $LOGITS_VARIANTS_OFFSET_KB: the logits start that many KB into their allocation (does
    // a kernel's speed depend on where its output rows lie?).
    const char* const offset_kb = std::getenv("LOGITS_VARIANTS_OFFSET_KB");
    const size_t offset_floats = offset_kb != nullptr ? std::strtoul(offset_kb, nullptr, 10) * 256 : 0;
    float* logits_allocation = nullptr;
    CHECK(cudaMalloc(&logits_allocation, (logits + offset_floats) * 4));
    a.logits = logits_allocation + offset_floats;
    // 2 x heads x 128 flops per row and key (the whole row; valid or not).
    const double flops = 2.0 * shape.rows * kHeads * 128.0 * kContext;
    std::vector<float> first(logits), got(logits);
    for (size_t v = 0; v < versions.size(); ++v) {
      CHECK(cudaMemset(a.logits, 0x55, logits * 4));
      versions[v].second(a);
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(v == 0 ? first.data() : got.data(), a.logits, logits * 4, cudaMemcpyDeviceToHost));
      size_t differing = 0;
      if (v > 0) {
        for (size_t i = 0; i < logits; ++i) differing += std::memcmp(&first[i], &got[i], 4) != 0;
      }
      const double us = median_us(25, [] {}, [&] { versions[v].second(a); });
      std::printf("%-18s %-10s %8.1f us %7.1f TFLOP/s  logits differing from %s: %zu\n", shape.name,
                  versions[v].first.c_str(), us, flops / us * 1e-6, versions[0].first.c_str(), differing);
    }
    if (shape.sequences == 1) {
      const Launch launch = versions.back().second;
      const double alone = median_us(25, [] {}, [&] { launch(a); });
      PagedLogitsArgs routed = a;
      routed.shared_row_run = 0;  // as the ABI entry point launches it
      const double abi = median_us(25, [] {}, [&] { launch(routed); });
      const double after_idle = median_us(
          9,
          [] {
            CHECK(cudaDeviceSynchronize());
            const timespec pause{0, 200 * 1000 * 1000};
            nanosleep(&pause, nullptr);
          },
          [&] { launch(a); });
      std::printf("%-18s %-10s back to back %.1f us; routed on the device %.1f us; alone after 200 ms idle %.1f us\n",
                  shape.name, versions.back().first.c_str(), alone, abi, after_idle);
    }
    for (const void* p : {static_cast<const void*>(a.q_values), static_cast<const void*>(a.weights),
                          static_cast<const void*>(a.row_seq), static_cast<const void*>(a.row_valid),
                          static_cast<const void*>(a.cache), static_cast<const void*>(a.page_tables),
                          static_cast<const void*>(logits_allocation)}) {
      cudaFree(const_cast<void*>(p));
    }
  }
  return 0;
}
