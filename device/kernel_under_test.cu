// File: kernel_under_test.cu — open_kernel() (api.h): our kernels or a dlopen'ed plug-in,
// both through the C ABI's tables (version 2; plug-ins of version 1 too), run on host
// batches (upload, call, download).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "device/api.h"
#include "device/kernel_abi.h"
#include "device/kernel_abi_convert.h"
#include "device/launch.h"
#include "device/plugins/abi_kernels.cuh"

namespace dsaf::dev {
namespace {

template <class T>
class Device {
 public:
  explicit Device(const std::vector<T>& host) : count_(host.size()) {
    check_cuda(cudaMalloc(&ptr_, std::max<size_t>(1, count_) * sizeof(T)), "cudaMalloc");
    if (count_) check_cuda(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  explicit Device(size_t count) : Device(std::vector<T>(count)) {}
  ~Device() { cudaFree(ptr_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    check_cuda(cudaDeviceSynchronize(), "kernel under test");
    if (count_) check_cuda(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_;
};

// A loaded plug-in library, closed with the last kernel that uses it.
struct Library {
  void* handle = nullptr;
  explicit Library(void* h) : handle(h) {}
  ~Library() {
    if (handle != nullptr) dlclose(handle);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
};

// A key batch in device memory, as either version's arguments.
struct DeviceKeyBatch {
  explicit DeviceKeyBatch(const HostKeyBatch& b)
      : in_bf16(b.input_bf16), in_f32(b.input_f32), positions(b.positions), seq(b.seq), tables(b.page_tables),
        cos(b.rope_cos), sin(b.rope_sin), weight(b.norm_weight), bias(b.norm_bias),
        weight_bf16(bf16_bits(b.norm_weight)), bias_bf16(bf16_bits(b.norm_bias)), cache(b.cache), host(b) {}
  // Round to nearest even on the host (cuda_bf16.h's host path; exact where verify drew
  // values bf16 holds, which it does for a kernel that declares bf16 norm parameters).
  static std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const __nv_bfloat16 h = __float2bfloat16_rn(v[i]);
      std::memcpy(&out[i], &h, 2);
    }
    return out;
  }
  template <class A>
  A common_args() const {
    A a{};
    a.input = host.bf16 ? static_cast<const void*>(in_bf16.get()) : in_f32.get();
    a.input_bf16 = host.bf16;
    a.num_tokens = static_cast<int64_t>(host.positions.size());
    a.positions = positions.get();
    a.seq = seq.get();
    a.page_tables = tables.get();
    a.page_table_stride = host.page_table_stride;
    a.rope_cos = cos.get();
    a.rope_sin = sin.get();
    a.norm_weight = host.norm_weight.empty() ? nullptr : weight.get();
    a.norm_bias = host.norm_bias.empty() ? nullptr : bias.get();
    a.cache = cache.get();
    a.page_size = host.page_size;
    return a;
  }
  dsaf_key_store_args_v1 v1() const {
    auto a = common_args<dsaf_key_store_args_v1>();
    a.recipe = to_abi(host.recipe);
    return a;
  }
  dsaf_key_store_args_v2 v2(const AbiRecipeV2& recipe) const {
    auto a = common_args<dsaf_key_store_args_v2>();
    a.rope_positions = static_cast<int64_t>(host.rope_cos.size() / 32);
    a.norm_weight_bf16 = host.norm_weight.empty() ? nullptr : weight_bf16.get();
    a.norm_bias_bf16 = host.norm_bias.empty() ? nullptr : bias_bf16.get();
    a.cache_bytes = static_cast<int64_t>(host.cache.size());
    a.recipe = recipe.get();
    return a;
  }
  Device<uint16_t> in_bf16;
  Device<float> in_f32;
  Device<int32_t> positions, seq, tables;
  Device<float> cos, sin, weight, bias;
  Device<uint16_t> weight_bf16, bias_bf16;
  Device<uint8_t> cache;
  const HostKeyBatch& host;
};

// A query batch in device memory, as either version's arguments.
struct DeviceQueryBatch {
  explicit DeviceQueryBatch(const HostQueryBatch& b)
      : rows(b.num_tokens * b.num_heads), in(b.input_bf16), positions(b.positions), wproj(b.wproj), cos(b.rope_cos),
        sin(b.rope_sin), weights(rows), values(rows * value_bytes(b.recipe.query_quant.format)),
        scales(rows * scale_bytes(b.recipe.query_quant.format)), host(b) {}
  template <class A>
  A common_args() const {
    A a{};
    a.input = in.get();
    a.input_bf16 = 1;
    a.num_tokens = host.num_tokens;
    a.num_heads = host.num_heads;
    a.positions = positions.get();
    a.wproj = wproj.get();
    a.rope_cos = cos.get();
    a.rope_sin = sin.get();
    a.q_values = values.get();
    a.q_scales = scales.get();
    a.weights = weights.get();
    return a;
  }
  HostQueryResult download() const { return {values.download(), scales.download(), weights.download()}; }
  int64_t rows;
  Device<uint16_t> in;
  Device<int32_t> positions;
  Device<float> wproj, cos, sin, weights;
  Device<uint8_t> values, scales;
  const HostQueryBatch& host;
};

// Holds the device for `ns` nanoseconds of its global timer (one thread; CallTimer).
__global__ void hold_device(uint64_t ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(2000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Device time of one entry point's call: events on stream 0 around it (api.h
// KernelUnderTest::last_device_ms), with nothing enqueued before it in between: the device
// is synchronised first. Warm timing (the studies) runs the call twice untimed, then queues
// the start event behind a kernel that holds the device for kHoldNs, so that by the time
// the event runs the host has queued the call's launches and the device runs them back to
// back, as in a stream that a caller keeps fed: the time is the call's device work, not
// the host's latency to its first launch. A call that takes longer than kHoldNs on the
// host, or that waits for the device (a copy back, a synchronisation), still has the idle
// gaps after that point counted, as its caller waits for them too. One call alone
// (verify) is timed from an idle device, launch latency included.
// The host time (api.h last_host_ms) is taken, under warm timing, around a second untimed
// call from a synchronised device: after the first (which pays for loading the kernels'
// modules on first use) and not around the held call, whose host time would include the
// rest of the hold for a call that waits for the device.
// The events are made at the first call, so that opening a kernel touches no CUDA state.
class CallTimer {
 public:
  // 2 ms: over 10x the host time of any of our entry points' launches on the studies'
  // batches (device-timing.json's host_ms), and a small fraction of a study's time.
  static constexpr uint64_t kHoldNs = 2'000'000;
  CallTimer() = default;
  ~CallTimer() {
    if (made_) {
      cudaEventDestroy(start_);
      cudaEventDestroy(stop_);
    }
  }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;
  // Runs call() between the events; returns its result. `warm`: runs it twice before,
  // untimed (KernelUnderTest::set_warm_timing); a failure there is returned at once.
  template <class Call>
  int time(Call call, bool warm) {
    if (!made_) {
      check_cuda(cudaEventCreate(&start_), "cudaEventCreate");
      check_cuda(cudaEventCreate(&stop_), "cudaEventCreate");
      made_ = true;
    }
    const auto host_timed = [&] {
      const auto host_start = std::chrono::steady_clock::now();
      const int status = call();
      last_host_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start).count();
      return status;
    };
    check_cuda(cudaDeviceSynchronize(), "before the call");
    if (warm) {
      int status = call();
      if (status == 0) {
        check_cuda(cudaDeviceSynchronize(), "before the host-timed call");
        status = host_timed();
      }
      if (status != 0) return status;
      check_cuda(cudaDeviceSynchronize(), "before the timed call");
      hold_device<<<1, 1>>>(kHoldNs);
      check_cuda(cudaGetLastError(), "hold_device");
    }
    check_cuda(cudaEventRecord(start_, 0), "cudaEventRecord");
    const int status = warm ? call() : host_timed();
    check_cuda(cudaEventRecord(stop_, 0), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop_), "kernel under test");
    float ms = 0.0f;
    check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    last_ms_ = ms;
    return status;
  }
  double last_ms() const { return last_ms_; }
  double last_host_ms() const { return last_host_ms_; }

 private:
  bool made_ = false;
  cudaEvent_t start_{}, stop_{};
  double last_ms_ = 0.0;
  double last_host_ms_ = 0.0;
};

// Paged logits and top-K through their (shared) ABI argument structs; `fail` reports a
// nonzero return. `fn`: an ABI entry point, or any callable on the same arguments.
template <class Fn, class Fail>
std::vector<float> run_paged_logits(Fn fn, const HostLogitsBatch& b, Fail fail, CallTimer& timer, bool warm) {
  const int rows = static_cast<int>(b.row_seq.size());
  Device<uint8_t> q_values(b.q_values), q_scales(b.q_scales), cache(b.cache);
  Device<float> weights(b.weights), logits(static_cast<size_t>(rows) * b.max_context);
  Device<int32_t> row_seq(b.row_seq), row_valid(b.row_valid), tables(b.page_tables);
  dsaf_paged_logits_args_v1 a{};
  a.q_values = q_values.get();
  a.q_scales = q_scales.get();
  a.weights = weights.get();
  a.q_format = static_cast<int32_t>(b.q_format);
  a.k_format = static_cast<int32_t>(b.k_format);
  a.accum = static_cast<int32_t>(b.accum);
  a.rows = rows;
  a.num_heads = b.num_heads;
  a.row_seq = row_seq.get();
  a.row_valid = row_valid.get();
  a.cache = cache.get();
  a.page_size = b.page_size;
  a.page_tables = tables.get();
  a.page_table_stride = b.page_table_stride;
  a.max_context = b.max_context;
  a.logits = logits.get();
  if (timer.time([&] { return fn(&a); }, warm) != 0) fail("paged_logits");
  return logits.download();
}

// `fn(args, row_status)`: row_status is null (the entry checks its rows' statuses itself:
// every ABI entry), or, with `statuses_after`, [rows] for the statuses the entry writes
// without synchronising, checked here after the timed call, outside its window.
template <class Fn, class Fail>
std::vector<int32_t> run_topk(Fn fn, const HostTopKBatch& b, Fail fail, CallTimer& timer, bool warm,
                              bool statuses_after) {
  const int rows = static_cast<int>(b.valid_lengths.size());
  Device<float> scores(b.scores);
  Device<int32_t> lengths(b.valid_lengths), indices(static_cast<size_t>(rows) * b.k);
  Device<int32_t> statuses(statuses_after ? static_cast<size_t>(rows) : 0);
  dsaf_topk_args_v1 a{};
  a.scores = scores.get();
  a.row_stride = b.row_stride;
  a.rows = rows;
  a.valid_lengths = lengths.get();
  a.k = b.k;
  a.indices = indices.get();
  int32_t* row_status = statuses_after ? statuses.get() : nullptr;
  if (timer.time([&] { return fn(&a, row_status); }, warm) != 0) fail("topk");
  if (statuses_after) {
    // Reported as the synchronous entry reports a bad row: its message as the entry's error
    // (only our entries write statuses after; their last_error reads abi_last_error).
    try {
      check_topk_row_statuses(statuses.download(), b.row_stride);
    } catch (const Error& e) {
      abi_last_error() = e.what();
      fail("topk");
    }
  }
  return indices.download();
}

// What an entry point a kernel lacks answers.
[[noreturn]] void missing(const std::string& name, const char* what) {
  throw Error(ErrorKind::kBadInput, name + " has no " + what);
}

// A failed call: the plug-in's message. A scoring call that failed on bad input (a NaN
// score, a length outside the row) is the caller's bad input; anything else is the
// environment's.
std::function<void(const char*)> failure(const std::string& name, const char* (*last_error)(), ErrorKind kind) {
  return [name, last_error, kind](const char* what) {
    throw Error(kind, name + ": " + what + " failed: " + (last_error ? last_error() : "(no message)"));
  };
}

// A version-1 plug-in (and its optional dsaf_scoring_v1).
class KernelV1 : public KernelUnderTest {
 public:
  KernelV1(const dsaf_kernel_v1* table, const dsaf_scoring_v1* scoring, std::shared_ptr<Library> library)
      : table_(table), scoring_(scoring), library_(std::move(library)) {}
  std::string name() const override { return table_->name ? table_->name : "(unnamed)"; }
  KernelCapabilities capabilities() const override {
    KernelCapabilities c;
    c.key_store = true;
    c.query_path = table_->query_quant != nullptr;
    c.paged_logits = scoring_ != nullptr && scoring_->paged_logits != nullptr;
    c.topk = scoring_ != nullptr && scoring_->topk != nullptr;
    c.store_formats = builtin_key_caps().store_formats;
    c.page_sizes = builtin_key_caps().page_sizes;
    c.bf16_input = c.fp32_input = true;
    c.logits_exact_order = scoring_ == nullptr || scoring_->logits_contract == 0;
    return c;
  }
  std::vector<uint8_t> key_store(const HostKeyBatch& b) const override {
    const DeviceKeyBatch d(b);
    const dsaf_key_store_args_v1 a = d.v1();
    if (timer_.time([&] { return table_->key_store(&a); }, warm_timing_) != 0) {
      failure(name(), table_->last_error, ErrorKind::kEnvironment)("key_store");
    }
    return d.cache.download();
  }
  HostQueryResult query_quant(const HostQueryBatch& b) const override {
    if (table_->query_quant == nullptr) missing(name(), "query path");
    const DeviceQueryBatch d(b);
    auto a = d.common_args<dsaf_query_args_v1>();
    a.recipe = to_abi(b.recipe);
    if (timer_.time([&] { return table_->query_quant(&a); }, warm_timing_) != 0) {
      failure(name(), table_->last_error, ErrorKind::kEnvironment)("query_quant");
    }
    return d.download();
  }
  std::vector<float> paged_logits(const HostLogitsBatch& b) const override {
    if (!capabilities().paged_logits) missing(name(), "paged logits");
    return run_paged_logits(scoring_->paged_logits, b, failure(name(), scoring_->last_error, ErrorKind::kBadInput),
                            timer_, warm_timing_);
  }
  std::vector<int32_t> topk(const HostTopKBatch& b) const override {
    if (!capabilities().topk) missing(name(), "top-K");
    const auto entry = [this](const dsaf_topk_args_v1* a, int32_t*) { return scoring_->topk(a); };
    return run_topk(entry, b, failure(name(), scoring_->last_error, ErrorKind::kBadInput), timer_, warm_timing_,
                    false);
  }
  double last_device_ms() const override { return timer_.last_ms(); }
  double last_host_ms() const override { return timer_.last_host_ms(); }

 private:
  mutable CallTimer timer_;
  const dsaf_kernel_v1* table_;
  const dsaf_scoring_v1* scoring_;
  std::shared_ptr<Library> library_;
};

// Our kernels' entries beside their table, for what the ABI cannot carry (all null for a
// plug-in): the logits with a row-run hint (abi_paged_logits_hinted), the top-K with its
// rows' statuses checked after the call (abi_topk_with_status), and the table whose key
// store walks in batch order, for batches that repeat few positions (null as well when the
// spec names a walk).
using HintedLogits = int (*)(const dsaf_paged_logits_args_v1*, int shared_row_run);
using StatusTopK = int (*)(const dsaf_topk_args_v1*, int32_t* row_status);
struct NativeEntries {
  HintedLogits hinted_logits = nullptr;
  StatusTopK status_topk = nullptr;
  const dsaf_kernel_v2* batch_order_keys = nullptr;
};

// The tile order (KeyTileWalk) puts tiles of equal positions side by side so that they
// share RoPE rows, for the price of building it (a cooperative launch) every call. A batch
// in which at most 1/kFewRepeats of the tokens repeat a position is walked in batch order:
// at 0.7% repeats (a 128K needle's key calls) batch order took 48.0% of copy against the
// hand-out walk's 41.5% (docs/RESULTS.md); where every position repeats 16 times (16 x 64K)
// the hand-out walk is the faster (docs/key-path-speed.md). The bound between is not
// measured.
inline constexpr int64_t kFewRepeats = 8;
bool repeats_few_positions(const HostKeyBatch& b) {
  return b.repeated_positions >= 0 &&
         b.repeated_positions * kFewRepeats <= static_cast<int64_t>(b.positions.size());
}

// A version-2 plug-in, or our kernels (`name` overrides the table's: their spec; `native`
// their entries beside the table, used when a batch gives the hint they need).
class KernelV2 : public KernelUnderTest {
 public:
  KernelV2(const dsaf_kernel_v2* table, std::shared_ptr<Library> library, std::string name = "",
           NativeEntries native = {})
      : table_(table), library_(std::move(library)), name_(std::move(name)), native_(native) {}
  std::string name() const override {
    if (!name_.empty()) return name_;
    return table_->name ? table_->name : "(unnamed)";
  }
  KernelCapabilities capabilities() const override {
    const dsaf_key_caps_v2& k = table_->key_caps;
    KernelCapabilities c;
    c.key_store = table_->key_store != nullptr;
    c.query_path = table_->query_quant != nullptr;
    c.paged_logits = table_->paged_logits != nullptr;
    c.topk = table_->topk != nullptr;
    c.store_formats = k.store_formats;
    c.page_sizes = k.page_sizes;
    c.bf16_input = (k.input_dtypes & DSAF_INPUT_BF16) != 0;
    c.fp32_input = (k.input_dtypes & DSAF_INPUT_FP32) != 0;
    c.norm_params_bf16 = k.norm_params_bf16 != 0;
    c.max_position = k.max_position;
    c.max_tokens = k.max_tokens;
    c.logits_exact_order = table_->logits_contract == 0;
    c.topk_contract = static_cast<TopKContract>(table_->topk_contract);
    c.topk_padding = static_cast<TopKPadding>(table_->topk_padding);
    c.topk_k = table_->topk_k;
    return c;
  }
  std::vector<uint8_t> key_store(const HostKeyBatch& b) const override {
    if (table_->key_store == nullptr) missing(name(), "key store");
    const DeviceKeyBatch d(b);
    const AbiRecipeV2 recipe(b.recipe);
    const dsaf_key_store_args_v2 a = d.v2(recipe);
    const dsaf_kernel_v2* keys = native_.batch_order_keys != nullptr && repeats_few_positions(b)
                                     ? native_.batch_order_keys
                                     : table_;
    if (timer_.time([&] { return keys->key_store(&a); }, warm_timing_) != 0) {
      failure(name(), table_->last_error, ErrorKind::kEnvironment)("key_store");
    }
    return d.cache.download();
  }
  HostQueryResult query_quant(const HostQueryBatch& b) const override {
    if (table_->query_quant == nullptr) missing(name(), "query path");
    const DeviceQueryBatch d(b);
    const AbiRecipeV2 recipe(b.recipe);
    auto a = d.common_args<dsaf_query_args_v2>();
    a.rope_positions = static_cast<int64_t>(b.rope_cos.size() / 32);
    a.recipe = recipe.get();
    if (timer_.time([&] { return table_->query_quant(&a); }, warm_timing_) != 0) {
      failure(name(), table_->last_error, ErrorKind::kEnvironment)("query_quant");
    }
    return d.download();
  }
  std::vector<float> paged_logits(const HostLogitsBatch& b) const override {
    if (table_->paged_logits == nullptr) missing(name(), "paged logits");
    const auto fail = failure(name(), table_->last_error, ErrorKind::kBadInput);
    if (native_.hinted_logits == nullptr || b.shared_row_run == 0) {
      return run_paged_logits(table_->paged_logits, b, fail, timer_, warm_timing_);
    }
    const auto hinted = [&](const dsaf_paged_logits_args_v1* a) { return native_.hinted_logits(a, b.shared_row_run); };
    return run_paged_logits(hinted, b, fail, timer_, warm_timing_);
  }
  std::vector<int32_t> topk(const HostTopKBatch& b) const override {
    if (table_->topk == nullptr) missing(name(), "top-K");
    const auto fail = failure(name(), table_->last_error, ErrorKind::kBadInput);
    if (native_.status_topk != nullptr) return run_topk(native_.status_topk, b, fail, timer_, warm_timing_, true);
    const auto entry = [this](const dsaf_topk_args_v1* a, int32_t*) { return table_->topk(a); };
    return run_topk(entry, b, fail, timer_, warm_timing_, false);
  }
  double last_device_ms() const override { return timer_.last_ms(); }
  double last_host_ms() const override { return timer_.last_host_ms(); }

 private:
  mutable CallTimer timer_;
  const dsaf_kernel_v2* table_;
  std::shared_ptr<Library> library_;
  std::string name_;
  NativeEntries native_;
};

// Our kernels' ABI table for a schedule known at run time: one instantiation per
// (width, grid cap, walk, logits kernel), chosen here.
template <int kLanes, int kMaxBlocks, bool kFast>
const dsaf_kernel_v2* builtin_table(KeyTileWalk walk) {
  switch (walk) {
    case KeyTileWalk::kBatchOrder: return abi_table_v2<kLanes, kMaxBlocks, KeyTileWalk::kBatchOrder, kFast>("builtin");
    case KeyTileWalk::kTileOrder: return abi_table_v2<kLanes, kMaxBlocks, KeyTileWalk::kTileOrder, kFast>("builtin");
    case KeyTileWalk::kHandOut: break;
  }
  return abi_table_v2<kLanes, kMaxBlocks, KeyTileWalk::kHandOut, kFast>("builtin");
}

template <int kMaxBlocks, bool kFast>
const dsaf_kernel_v2* builtin_table(int lanes, KeyTileWalk walk) {
  switch (lanes) {
    case 1: return builtin_table<1, kMaxBlocks, kFast>(walk);
    case 2: return builtin_table<2, kMaxBlocks, kFast>(walk);
    case 4: return builtin_table<4, kMaxBlocks, kFast>(walk);
    case 8: return builtin_table<8, kMaxBlocks, kFast>(walk);
    default: return builtin_table<kAutoLanesPerHead, kMaxBlocks, kFast>(walk);
  }
}

// "builtin" or "builtin-fast", then knobs separated by ':' (api.h open_kernel); null when
// `spec` is not one of ours.
std::unique_ptr<KernelUnderTest> open_builtin(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string base = spec.substr(0, colon);
  if (base != "builtin" && base != "builtin-fast") return nullptr;
  int lanes = kAutoLanesPerHead;
  bool one_block = false;
  KeyTileWalk walk = KeyTileWalk::kHandOut;
  bool walk_named = false;
  bool topk_by_index = false;
  for (size_t at = colon; at != std::string::npos;) {
    const size_t next = spec.find(':', at + 1);
    const std::string knob = spec.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    at = next;
    if (knob == "1" || knob == "2" || knob == "4" || knob == "8") {
      lanes = std::stoi(knob);
    } else if (knob == "grid1") {
      one_block = true;
    } else if (knob == to_string(KeyTileWalk::kBatchOrder)) {
      walk = KeyTileWalk::kBatchOrder;
      walk_named = true;
    } else if (knob == to_string(KeyTileWalk::kTileOrder)) {
      walk = KeyTileWalk::kTileOrder;
      walk_named = true;
    } else if (knob == to_string(KeyTileWalk::kHandOut)) {
      walk = KeyTileWalk::kHandOut;
      walk_named = true;
    } else if (knob == "by-index") {
      topk_by_index = true;
    } else {
      throw Error(ErrorKind::kBadInput, "kernel '" + spec + "': unknown knob '" + knob +
                                            "' (lanes 1, 2, 4, 8; grid1; batch-order, tile-order, hand-out; by-index)");
    }
  }
  const bool fast = base == "builtin-fast";
  const auto table_for = [&](KeyTileWalk w) {
    return one_block ? (fast ? builtin_table<1, true>(lanes, w) : builtin_table<1, false>(lanes, w))
                     : (fast ? builtin_table<0, true>(lanes, w) : builtin_table<0, false>(lanes, w));
  };
  const dsaf_kernel_v2* table = table_for(walk);
  if (topk_by_index) table = with_topk_by_index(table);
  NativeEntries native;
  native.hinted_logits = fast ? &abi_paged_logits_hinted<true> : &abi_paged_logits_hinted<false>;
  native.status_topk =
      topk_by_index ? &abi_topk_with_status<TopKOrder::kByIndex> : &abi_topk_with_status<TopKOrder::kByScore>;
  if (!walk_named) native.batch_order_keys = table_for(KeyTileWalk::kBatchOrder);
  return std::make_unique<KernelV2>(table, nullptr, spec, native);
}

}  // namespace

namespace {

void require_gpu() {
  const GpuInfo gpu = query_gpu();
  if (gpu.device_count == 0) {
    throw Error(ErrorKind::kEnvironment,
                "this needs a GPU: no CUDA device (" + (gpu.error.empty() ? "0 devices" : gpu.error) + ")");
  }
}

std::unique_ptr<KernelUnderTest> open_plugin(const std::string& spec);

}  // namespace

void probe_kernel(const std::string& spec) {
  if (!open_builtin(spec)) open_plugin(spec);
}

// The plug-in is opened and its table checked before the GPU is asked for, so a wrong path
// or a broken library is reported on any machine.
std::unique_ptr<KernelUnderTest> open_kernel(const std::string& spec) {
  if (auto builtin = open_builtin(spec)) {
    require_gpu();
    return builtin;
  }
  auto plugin = open_plugin(spec);
  require_gpu();
  return plugin;
}

namespace {

// A version-2 table's declarations checked before any is used: each is a value its field
// defines (docs/verify.md), else kBadInput naming the field. An enum cast from an unknown
// value, a negative limit read as "no limit", or max_position + 1 overflowing would make
// verify draw cases from something the plug-in never meant.
void check_table(const std::string& spec, const dsaf_kernel_v2& t) {
  const auto refuse = [&spec](const std::string& field, const std::string& value, const std::string& rule) {
    throw Error(ErrorKind::kBadInput,
                "'" + spec + "': dsaf_kernel_v2." + field + " is " + value + ", not " + rule + " (docs/verify.md)");
  };
  const auto hex = [](uint32_t v) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%x", v);
    return std::string(text);
  };
  const dsaf_key_caps_v2& k = t.key_caps;
  // Bits 1..5: StorageFormat kFp32 .. kFp4SimulatedBf16 (bit 0, kNone, stores nothing).
  if ((k.store_formats & ~0x3Eu) != 0) refuse("key_caps.store_formats", hex(k.store_formats), "bits 1..5");
  if ((k.page_sizes & ~0x1FFu) != 0) refuse("key_caps.page_sizes", hex(k.page_sizes), "bits 0..8 (pages of 1..256)");
  if ((k.input_dtypes & ~(DSAF_INPUT_BF16 | DSAF_INPUT_FP32)) != 0) {
    refuse("key_caps.input_dtypes", hex(k.input_dtypes), "DSAF_INPUT_BF16 | DSAF_INPUT_FP32 bits");
  }
  if (k.norm_params_bf16 != 0 && k.norm_params_bf16 != 1) {
    refuse("key_caps.norm_params_bf16", std::to_string(k.norm_params_bf16), "0 or 1");
  }
  if (k.max_position < 0 || k.max_position > INT32_MAX) {
    refuse("key_caps.max_position", std::to_string(k.max_position), "0 (no limit) or a position in 1..2^31 - 1");
  }
  if (k.max_tokens < 0) refuse("key_caps.max_tokens", std::to_string(k.max_tokens), "0 (no limit) or a count >= 1");
  if (t.logits_contract != 0 && t.logits_contract != 1) {
    refuse("logits_contract", std::to_string(t.logits_contract), "0 (exact-order) or 1 (bounded)");
  }
  if (t.topk_contract < DSAF_TOPK_ORDERED || t.topk_contract > DSAF_TOPK_SET_TIES) {
    refuse("topk_contract", std::to_string(t.topk_contract), "DSAF_TOPK_ORDERED, _SET or _SET_TIES (0..2)");
  }
  if (t.topk_padding != DSAF_TOPK_PAD_MINUS_ONE && t.topk_padding != DSAF_TOPK_PAD_UNREAD) {
    refuse("topk_padding", std::to_string(t.topk_padding), "DSAF_TOPK_PAD_MINUS_ONE or _UNREAD (0, 1)");
  }
  if (t.topk_k < 0 || t.topk_k > kTopKMaxK) {
    refuse("topk_k", std::to_string(t.topk_k), "0 (any K) or a K in 1.." + std::to_string(kTopKMaxK));
  }
}

std::unique_ptr<KernelUnderTest> open_plugin(const std::string& spec) {
  // A path (dlopen searches the library path for a bare name) must be a regular file:
  // dlopen would block on a FIFO and read a device.
  if (spec.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(spec.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      throw Error(ErrorKind::kBadInput, "--kernel '" + spec + "': is " +
                                            (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
                                            ", not a plug-in library");
    }
  }
  void* handle = dlopen(spec.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) throw Error(ErrorKind::kEnvironment, "cannot load '" + spec + "': " + dlerror());
  const auto library = std::make_shared<Library>(handle);
  void* get = dlsym(handle, "dsaf_kernel_get");
  if (get == nullptr) throw Error(ErrorKind::kBadInput, "'" + spec + "' does not export dsaf_kernel_get");
  // Version 2 first; a plug-in that does not speak it answers NULL.
  const auto* v2 = reinterpret_cast<dsaf_kernel_get_v2_fn>(get)(DSAF_KERNEL_ABI_VERSION_2);
  if (v2 != nullptr) {
    if (v2->abi_version != DSAF_KERNEL_ABI_VERSION_2) {
      throw Error(ErrorKind::kBadInput, "'" + spec + "': dsaf_kernel_get(2) returned a table of version " +
                                            std::to_string(v2->abi_version));
    }
    if (v2->key_store == nullptr && v2->query_quant == nullptr && v2->paged_logits == nullptr && v2->topk == nullptr) {
      throw Error(ErrorKind::kBadInput, "'" + spec + "' declares no entry point (key store, query, logits, top-K)");
    }
    check_table(spec, *v2);
    return std::make_unique<KernelV2>(v2, library);
  }
  const auto* v1 = reinterpret_cast<dsaf_kernel_get_fn>(get)(DSAF_KERNEL_ABI_VERSION);
  if (v1 == nullptr || v1->abi_version != DSAF_KERNEL_ABI_VERSION || v1->key_store == nullptr) {
    throw Error(ErrorKind::kBadInput, "'" + spec + "' does not export dsaf_kernel_get for ABI version 2 or 1");
  }
  const auto get_scoring = reinterpret_cast<dsaf_scoring_get_fn>(dlsym(handle, "dsaf_scoring_get"));
  const dsaf_scoring_v1* scoring = get_scoring ? get_scoring(DSAF_SCORING_ABI_VERSION) : nullptr;
  if (scoring != nullptr && scoring->abi_version != DSAF_SCORING_ABI_VERSION) scoring = nullptr;
  if (scoring != nullptr && scoring->logits_contract != 0 && scoring->logits_contract != 1) {
    throw Error(ErrorKind::kBadInput, "'" + spec + "': dsaf_scoring_v1.logits_contract is " +
                                          std::to_string(scoring->logits_contract) + ", not 0 or 1");
  }
  return std::make_unique<KernelV1>(v1, scoring, library);
}

}  // namespace

}  // namespace dsaf::dev
