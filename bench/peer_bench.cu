// Peer benchmark: our kernels and the upstream kernels (conformance/ adapters) timed side
// by side in one process through the same ABI call (device/kernel_abi.h version 2), on
// the same inputs, with each result compared byte for byte against the first kernel's.
//   peer_bench OUT.json key RECIPE KERNEL...        key store, 1M bf16 tokens: 16 sequences
//                                                   x 64K positions, pages of 64, shuffled
//   peer_bench OUT.json topk ROWS LENGTH K KERNEL... top-K of fp32 rows of LENGTH scores
// KERNEL: "builtin" (our kernels, the default schedule), "builtin:by-index" (the same with
// top-K rows as positions in ascending order, no final sort) or a plug-in's path; for
// top-K also "builtin:async" and "builtin:by-index:async": our top-K as the studies call
// it, the rows' statuses written to a device array and checked after the timed calls,
// where the ABI's call waits for the kernel to check them before it returns.
// RECIPE is a preset's name, or a recipe's in the file DSAF_PEER_RECIPE_FILE names (a
// recipe file as `dsa-fidelity recipes --json` writes it, e.g. the conformance recipes
// under which an upstream key kernel is byte-exact: scripts/conformance_report.py recipes).
// Key-store calls repeat one batch: our table keeps its tile order from one call to the
// next when the positions are the same (device/plugins/abi_kernels.cuh).
// DSAF_PEER_NEW_POSITIONS=1 alternates two batches of the same tokens, the first 64 in
// another order (tokens 0-31 and 32-63 exchanged), so that no call's positions are the
// previous call's and every call of ours sorts its tiles; the cache bytes are the same.
// Times are the median of 21 calls (CUDA events around the ABI call: an adapter's index
// and table set-up is counted, as a caller of it pays it); DSAF_PEER_RUNS=N changes the
// count and drops the warm-ups (a profiler run: scripts/conformance.sh times the kernels
// alone with ncu). A kernel that refuses the shape (an error from its first call) is
// reported and left out.
// Fractions are of the measured device-to-device copy bandwidth, of the bytes a kernel
// must move: key store, the bf16 input read and the cache written; top-K, the scores read
// and the indices written.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/batch_shape.h"
#include "bench/gpu_timing.h"
#include "device/kernel_abi.h"
#include "device/kernel_abi_convert.h"
#include "device/plugins/abi_kernels.cuh"
#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/recipe.h"
#include "reference/recipe_json.h"
#include "reference/rope.h"

namespace {

using namespace dsaf;

constexpr int64_t kTokens = int64_t{1} << 20;
constexpr int kPage = 64;

struct Kernel {
  std::string spec;
  const dsaf_kernel_v2* table = nullptr;
  int (*topk)(const dsaf_topk_args_v1*) = nullptr;  // the table's, or an :async call below
};

// The rows' statuses of the :async calls ([rows], allocated by bench_topk).
int32_t* async_status = nullptr;

template <dev::TopKOrder kOrder>
int topk_async(const dsaf_topk_args_v1* a) {
  return dev::abi_topk_with_status<kOrder>(a, async_status);
}

// Our table, or the plug-in's; exits 2 with a message when it cannot be had.
Kernel open(const std::string& spec) {
  const bool async = spec == "builtin:async" || spec == "builtin:by-index:async";
  if (spec == "builtin" || spec == "builtin:by-index" || async) {
    const dsaf_kernel_v2* table =
        dev::abi_table_v2<dev::kAutoLanesPerHead, 0, dev::KeyTileWalk::kHandOut, false>("builtin");
    const bool by_score = spec == "builtin" || spec == "builtin:async";
    if (!by_score) table = dev::with_topk_by_index(table);
    auto* topk = !async ? table->topk
                 : by_score ? &topk_async<dev::TopKOrder::kByScore>
                            : &topk_async<dev::TopKOrder::kByIndex>;
    return {spec, table, topk};
  }
  void* lib = dlopen(spec.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "peer_bench: %s\n", dlerror());
    std::exit(2);
  }
  const auto get = reinterpret_cast<dsaf_kernel_get_v2_fn>(dlsym(lib, "dsaf_kernel_get"));
  const dsaf_kernel_v2* table = get != nullptr ? get(DSAF_KERNEL_ABI_VERSION_2) : nullptr;
  if (table == nullptr) {
    std::fprintf(stderr, "peer_bench: %s has no version-2 table\n", spec.c_str());
    std::exit(2);
  }
  return {spec, table, table->topk};
}

template <class T>
T* upload(const std::vector<T>& host) {
  T* d = nullptr;
  BENCH_CHECK(cudaMalloc(&d, std::max<size_t>(1, host.size()) * sizeof(T)));
  BENCH_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> download(const T* d, size_t count) {
  std::vector<T> host(count);
  BENCH_CHECK(cudaMemcpy(host.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

int runs() {
  const char* n = std::getenv("DSAF_PEER_RUNS");
  return n != nullptr && std::atoi(n) > 0 ? std::atoi(n) : 21;
}
// Under a profiler (DSAF_PEER_RUNS set) the first, untimed call is the only warm-up.
int warmups() { return std::getenv("DSAF_PEER_RUNS") != nullptr ? 0 : 3; }

// `extra`: further members, each starting with ", ".
std::string case_json(const Kernel& k, float ms, double bytes, double copy_gbps, const std::string& same,
                      const std::string& extra = "") {
  char line[512];
  std::snprintf(line, sizeof line,
                "    {\"kernel\": \"%s\", \"name\": \"%s\", \"ms\": %.4f, \"gbps\": %.1f, \"fraction_of_copy\": %.3f, "
                "\"same_as_first\": %s%s}",
                k.spec.c_str(), k.table->name, ms, bytes / (ms * 1e-3) / 1e9, bytes / (ms * 1e-3) / 1e9 / copy_gbps,
                same.c_str(), extra.c_str());
  return line;
}

// The key stage's recipe: the one named in DSAF_PEER_RECIPE_FILE when that is set and holds
// it, else the preset of that name; dsaf::Error(kBadInput) when neither does.
ref::Recipe key_recipe(const std::string& name) {
  if (const char* file = std::getenv("DSAF_PEER_RECIPE_FILE"); file != nullptr && *file != '\0') {
    for (ref::Recipe& r : ref::load_recipe_file(file))
      if (r.name == name) return std::move(r);
  }
  return ref::preset(name);
}

std::string bench_key(const ref::Recipe& recipe, const std::vector<Kernel>& kernels, double copy_gbps) {
  const std::string& recipe_name = recipe.name;
  const int seq_len = bench::key_sequence_length(kTokens, kPage);  // batch_shape.h
  if (seq_len < 0) std::exit(2);
  const int token_bytes = ref::cache_bytes_per_token(recipe.key_quant.format);
  if (token_bytes <= 0) {
    std::fprintf(stderr, "peer_bench: %s stores no key cache\n", recipe_name.c_str());
    std::exit(2);
  }
  // Inputs as bench/key_store_bench.cu draws them; norm weight and bias bf16-exact (the
  // upstream kernels take them in the input's dtype or fp32).
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> input(kTokens * 128);
  for (size_t i = 0; i < input.size(); ++i) input[i] = ref::encode_bf16(normal(rng) * (i % 37 == 3 ? 40.0f : 1.0f));
  std::vector<int32_t> positions(kTokens), seq(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) seq[t] = static_cast<int32_t>(t / seq_len), positions[t] = t % seq_len;
  const int64_t pages_per_seq = seq_len / kPage, pages = kTokens / kPage;
  std::vector<int32_t> tables(pages);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  std::vector<uint16_t> weight_bf16(128), bias_bf16(128);
  std::vector<float> weight(128), bias(128);
  for (int i = 0; i < 128; ++i) {
    weight_bf16[i] = ref::encode_bf16(1.0f + 0.1f * normal(rng));
    bias_bf16[i] = ref::encode_bf16(0.1f * normal(rng));
    weight[i] = ref::decode_bf16(weight_bf16[i]);
    bias[i] = ref::decode_bf16(bias_bf16[i]);
  }
  const bool layer_norm = recipe.key_norm.kind == ref::NormKind::kLayerNorm;
  const ref::RopeTable rope(recipe.rope.table, seq_len);
  const std::vector<float> cos(rope.cos(0), rope.cos(0) + int64_t{seq_len} * 32);
  const std::vector<float> sin(rope.sin(0), rope.sin(0) + int64_t{seq_len} * 32);
  const dev::AbiRecipeV2 abi_recipe(recipe);

  dsaf_key_store_args_v2 a{};
  a.input = upload(input);
  a.input_bf16 = 1;
  a.num_tokens = kTokens;
  a.positions = upload(positions);
  a.seq = upload(seq);
  a.page_tables = upload(tables);
  a.page_table_stride = pages_per_seq;
  a.rope_cos = upload(cos);
  a.rope_sin = upload(sin);
  a.rope_positions = seq_len;
  a.norm_weight = recipe.key_norm.kind != ref::NormKind::kNone ? upload(weight) : nullptr;
  a.norm_bias = layer_norm ? upload(bias) : nullptr;
  a.norm_weight_bf16 = recipe.key_norm.kind != ref::NormKind::kNone ? upload(weight_bf16) : nullptr;
  a.norm_bias_bf16 = layer_norm ? upload(bias_bf16) : nullptr;
  a.cache_bytes = pages * kPage * token_bytes;
  BENCH_CHECK(cudaMalloc(&a.cache, a.cache_bytes));
  a.page_size = kPage;
  a.recipe = abi_recipe.get();

  // The second batch of DSAF_PEER_NEW_POSITIONS: tokens 0-31 and 32-63 exchanged (one
  // sequence, so only their positions and rows move).
  const bool new_positions = std::getenv("DSAF_PEER_NEW_POSITIONS") != nullptr;
  dsaf_key_store_args_v2 swapped = a;
  if (new_positions) {
    std::swap_ranges(input.begin(), input.begin() + 32 * 128, input.begin() + 32 * 128);
    std::swap_ranges(positions.begin(), positions.begin() + 32, positions.begin() + 32);
    swapped.input = upload(input);
    swapped.positions = upload(positions);
  }

  const double bytes = static_cast<double>(kTokens) * (256 + token_bytes);
  std::string json;
  std::vector<uint8_t> first;
  for (const Kernel& k : kernels) {
    if (k.table->key_store == nullptr) {
      std::fprintf(stderr, "peer_bench: %s has no key store\n", k.spec.c_str());
      std::exit(2);
    }
    BENCH_CHECK(cudaMemset(a.cache, 0, a.cache_bytes));
    if (k.table->key_store(&a) != 0 || cudaDeviceSynchronize() != cudaSuccess) {  // a refusal: the others still run
      std::printf("key %-14s %-60s refused: %s\n", recipe_name.c_str(), k.table->name, k.table->last_error());
      continue;
    }
    bool odd = false;
    const auto call = [&] {
      odd = new_positions && !odd;
      if (k.table->key_store(odd ? &swapped : &a) != 0) {
        std::fprintf(stderr, "peer_bench: %s: %s\n", k.spec.c_str(), k.table->last_error());
        std::exit(2);
      }
    };
    const std::vector<uint8_t> cache = download(a.cache, a.cache_bytes);
    const std::string same = first.empty() ? "null" : (cache == first ? "true" : "false");
    if (first.empty()) first = cache;
    const float ms = bench::median_ms(call, runs(), 1, warmups());
    std::printf("key %-14s %-60s %.4f ms  %.0f%% of copy  same bytes as first: %s\n", recipe_name.c_str(),
                k.table->name, ms, 100 * bytes / (ms * 1e-3) / 1e9 / copy_gbps, same.c_str());
    json += (json.empty() ? "" : ",\n") + case_json(k, ms, bytes, copy_gbps, same);
  }
  return "  \"stage\": \"key_store\",\n  \"recipe\": \"" + recipe_name + "\",\n  \"tokens\": " +
         std::to_string(kTokens) + ",\n  \"sequence_length\": " + std::to_string(seq_len) +
         ",\n  \"page_size\": " + std::to_string(kPage) +
         ",\n  \"positions\": \"" + (new_positions ? "alternating" : "repeated") +
         "\",\n  \"bytes\": " + std::to_string(bytes) +
         ",\n  \"cases\": [\n" + json + "\n  ]";
}

// Top-K rows, every row at full length: distinct scores (a random permutation of a grid,
// so that every kernel's set is the one set), or with DSAF_PEER_TOPK_SCORES=gaussian
// standard normal scores (fp32; the K-th and (K+1)-th best of a row tie with probability
// ~1e-3 per row; such a row is reported, since its set is not one set and a kernel may
// differ there). The exact set of a row is the indices of its K best scores; each kernel's rows are
// compared with it, and a kernel that differs is counted in rows and in missing keys (a
// wrong key in a row of K distinct scores replaces one of the K best, so missing =
// intruding).
std::string bench_topk(int rows, int length, int k, const std::vector<Kernel>& kernels, double copy_gbps) {
  std::mt19937 rng(7);
  const char* kind = std::getenv("DSAF_PEER_TOPK_SCORES");
  const bool gaussian = kind != nullptr && std::string(kind) == "gaussian";
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> scores(static_cast<size_t>(rows) * length);
  std::vector<int32_t> order(length), exact;
  exact.reserve(static_cast<size_t>(rows) * k);
  for (int r = 0; r < rows; ++r) {
    float* row = scores.data() + static_cast<size_t>(r) * length;
    std::iota(order.begin(), order.end(), 0);
    if (gaussian) {
      for (int i = 0; i < length; ++i) row[i] = normal(rng);
      // order[i]: the rank of score i from the bottom (ties by index, irrelevant when the
      // K-th and (K+1)-th differ, checked below)
      std::vector<int32_t> by_score(length);
      std::iota(by_score.begin(), by_score.end(), 0);
      std::sort(by_score.begin(), by_score.end(), [&](int32_t a, int32_t b) { return row[a] < row[b]; });
      if (k < length && row[by_score[length - k]] == row[by_score[length - k - 1]]) {
        std::printf("topk row %d: the K-th and (K+1)-th scores tie; the seed gives another set\n", r);
      }
      for (int i = 0; i < length; ++i) order[by_score[i]] = i;
    } else {
      std::shuffle(order.begin(), order.end(), rng);
      for (int i = 0; i < length; ++i) row[i] = 0.25f * order[i] - 1000.0f;
    }
    for (int i = 0; i < length; ++i)
      if (order[i] >= length - k) exact.push_back(i);  // ascending index order, as the sorted sets below
  }
  dsaf_topk_args_v1 a{};
  a.scores = upload(scores);
  a.row_stride = length;
  a.rows = rows;
  a.valid_lengths = upload(std::vector<int32_t>(rows, length));
  a.k = k;
  BENCH_CHECK(cudaMalloc(&a.indices, static_cast<size_t>(rows) * k * sizeof(int32_t)));
  BENCH_CHECK(cudaMalloc(&async_status, static_cast<size_t>(rows) * sizeof(int32_t)));
  const double bytes = static_cast<double>(rows) * (4.0 * length + 4.0 * k);
  std::string json;
  std::vector<int32_t> first;
  for (const Kernel& kernel : kernels) {
    if (kernel.table->topk == nullptr || (kernel.table->topk_k != 0 && kernel.table->topk_k != k)) {
      std::printf("topk %-60s does not take K = %d: skipped\n", kernel.table->name, k);
      continue;
    }
    if (kernel.topk(&a) != 0 || cudaDeviceSynchronize() != cudaSuccess) {  // a refusal: the others still run
      std::printf("topk %-60s refused [%d x %d] K=%d: %s\n", kernel.table->name, rows, length, k,
                  kernel.table->last_error());
      continue;
    }
    const auto call = [&] {
      if (kernel.topk(&a) != 0) {
        std::fprintf(stderr, "peer_bench: %s: %s\n", kernel.spec.c_str(), kernel.table->last_error());
        std::exit(2);
      }
    };
    // Compared as sets per row (the contracts differ in order, never in the set here).
    std::vector<int32_t> indices = download(a.indices, static_cast<size_t>(rows) * k);
    int64_t rows_wrong = 0, keys_missing = 0;
    for (int r = 0; r < rows; ++r) {
      const auto row = indices.begin() + static_cast<size_t>(r) * k;
      std::sort(row, row + k);
      std::vector<int32_t> found;
      std::set_intersection(row, row + k, exact.begin() + static_cast<size_t>(r) * k,
                            exact.begin() + static_cast<size_t>(r + 1) * k, std::back_inserter(found));
      rows_wrong += found.size() != static_cast<size_t>(k);
      keys_missing += k - static_cast<int64_t>(found.size());
    }
    const std::string same = first.empty() ? "null" : (indices == first ? "true" : "false");
    if (first.empty()) first = indices;
    const float ms = bench::median_ms(call, runs(), 1, warmups());
    if (kernel.topk != kernel.table->topk) {  // :async: the timed calls' row statuses
      try {
        dev::check_topk_row_statuses(download(async_status, static_cast<size_t>(rows)), length);
      } catch (const Error& e) {
        std::fprintf(stderr, "peer_bench: %s: %s\n", kernel.spec.c_str(), e.what());
        std::exit(2);
      }
    }
    const char* label = kernel.spec.rfind("builtin", 0) == 0 ? kernel.spec.c_str() : kernel.table->name;
    std::printf("topk [%d x %d] K=%-5d %-52s %.4f ms  %.0f%% of copy  same set as first: %s; against the exact "
                "sets: %lld rows wrong, %lld keys missing\n",
                rows, length, k, label, ms, 100 * bytes / (ms * 1e-3) / 1e9 / copy_gbps, same.c_str(),
                static_cast<long long>(rows_wrong), static_cast<long long>(keys_missing));
    json += (json.empty() ? "" : ",\n") +
            case_json(kernel, ms, bytes, copy_gbps, same,
                      ", \"exact_rows_wrong\": " + std::to_string(rows_wrong) +
                          ", \"exact_keys_missing\": " + std::to_string(keys_missing));
  }
  return "  \"stage\": \"topk\",\n  \"scores\": \"" + std::string(gaussian ? "gaussian" : "distinct grid") +
         "\",\n  \"rows\": " + std::to_string(rows) + ",\n  \"length\": " + std::to_string(length) +
         ",\n  \"k\": " + std::to_string(k) + ",\n  \"bytes\": " + std::to_string(bytes) + ",\n  \"cases\": [\n" + json +
         "\n  ]";
}

int usage(const char* self) {
  std::fprintf(stderr, "usage: %s OUT.json key RECIPE KERNEL...\n       %s OUT.json topk ROWS LENGTH K KERNEL...\n",
               self, self);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return usage(argv[0]);
  const std::string out = argv[1], stage = argv[2];
  const int first_kernel = stage == "key" ? 4 : stage == "topk" ? 6 : argc;
  if (first_kernel >= argc) return usage(argv[0]);
  ref::Recipe recipe;
  try {
    if (stage == "key") recipe = key_recipe(argv[3]);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  std::vector<Kernel> kernels;
  for (int i = first_kernel; i < argc; ++i) kernels.push_back(open(argv[i]));
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbps = bench::copy_bandwidth_gbps();
  std::string body;
  if (stage == "key") {
    body = bench_key(recipe, kernels, copy_gbps);
  } else {
    const int rows = std::atoi(argv[3]), length = std::atoi(argv[4]), k = std::atoi(argv[5]);
    if (rows < 1 || length < 1 || k < 1 || k > length) return usage(argv[0]);
    body = bench_topk(rows, length, k, kernels, copy_gbps);
  }
  const std::string json = "{\n  \"gpu\": \"" + std::string(prop.name) + "\",\n  \"copy_bandwidth_gbps\": " +
                           std::to_string(copy_gbps) + ",\n" + body + "\n}\n";
  if (!bench::write_file(out.c_str(), json)) {
    std::fprintf(stderr, "peer_bench: cannot write %s\n", out.c_str());
    return 2;
  }
  return 0;
}
