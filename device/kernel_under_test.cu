// File: kernel_under_test.cu — open_kernel() (api.h): our kernels or a dlopen'ed plug-in,
// both through the C ABI table, run on host batches (upload, call, download).
#include <cuda_runtime.h>
#include <dlfcn.h>

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

class AbiKernel : public KernelUnderTest {
 public:
  AbiKernel(const dsaf_kernel_v1* table, void* library, const dsaf_scoring_v1* scoring = nullptr,
            std::string name = "")
      : table_(table), library_(library), scoring_(scoring), name_(std::move(name)) {}
  ~AbiKernel() override {
    if (library_ != nullptr) dlclose(library_);
  }
  std::string name() const override {
    if (!name_.empty()) return name_;
    return table_->name ? table_->name : "(unnamed)";
  }
  bool has_query_path() const override { return table_->query_quant != nullptr; }

  std::vector<uint8_t> key_store(const HostKeyBatch& b) const override {
    Device<uint16_t> in_bf16(b.input_bf16);
    Device<float> in_f32(b.input_f32);
    Device<int32_t> positions(b.positions), seq(b.seq), tables(b.page_tables);
    Device<float> cos(b.rope_cos), sin(b.rope_sin), weight(b.norm_weight), bias(b.norm_bias);
    Device<uint8_t> cache(b.cache);
    dsaf_key_store_args_v1 a{};
    a.input = b.bf16 ? static_cast<const void*>(in_bf16.get()) : in_f32.get();
    a.input_bf16 = b.bf16;
    a.num_tokens = static_cast<int64_t>(b.positions.size());
    a.positions = positions.get();
    a.seq = seq.get();
    a.page_tables = tables.get();
    a.page_table_stride = b.page_table_stride;
    a.rope_cos = cos.get();
    a.rope_sin = sin.get();
    a.norm_weight = b.norm_weight.empty() ? nullptr : weight.get();
    a.norm_bias = b.norm_bias.empty() ? nullptr : bias.get();
    a.cache = cache.get();
    a.page_size = b.page_size;
    a.recipe = to_abi(b.recipe);
    if (table_->key_store(&a) != 0) fail("key_store");
    return cache.download();
  }

  bool has_paged_logits() const override { return scoring_ != nullptr && scoring_->paged_logits != nullptr; }
  bool logits_exact_order() const override { return scoring_ == nullptr || scoring_->logits_contract == 0; }
  bool has_topk() const override { return scoring_ != nullptr && scoring_->topk != nullptr; }

  std::vector<float> paged_logits(const HostLogitsBatch& b) const override {
    if (!has_paged_logits()) return KernelUnderTest::paged_logits(b);
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
    if (scoring_->paged_logits(&a) != 0) fail_scoring("paged_logits");
    return logits.download();
  }

  std::vector<int32_t> topk(const HostTopKBatch& b) const override {
    if (!has_topk()) return KernelUnderTest::topk(b);
    const int rows = static_cast<int>(b.valid_lengths.size());
    Device<float> scores(b.scores);
    Device<int32_t> lengths(b.valid_lengths), indices(static_cast<size_t>(rows) * b.k);
    dsaf_topk_args_v1 a{};
    a.scores = scores.get();
    a.row_stride = b.row_stride;
    a.rows = rows;
    a.valid_lengths = lengths.get();
    a.k = b.k;
    a.indices = indices.get();
    if (scoring_->topk(&a) != 0) fail_scoring("topk");
    return indices.download();
  }

  HostQueryResult query_quant(const HostQueryBatch& b) const override {
    if (!has_query_path()) throw Error(ErrorKind::kBadInput, name() + " has no query path");
    const int64_t rows = b.num_tokens * b.num_heads;
    const int vb = value_bytes(b.recipe.query_quant.format), sb = scale_bytes(b.recipe.query_quant.format);
    Device<uint16_t> in(b.input_bf16);
    Device<int32_t> positions(b.positions);
    Device<float> wproj(b.wproj), cos(b.rope_cos), sin(b.rope_sin), weights(rows);
    Device<uint8_t> values(rows * vb), scales(rows * sb);
    dsaf_query_args_v1 a{};
    a.input = in.get();
    a.input_bf16 = 1;
    a.num_tokens = b.num_tokens;
    a.num_heads = b.num_heads;
    a.positions = positions.get();
    a.wproj = wproj.get();
    a.rope_cos = cos.get();
    a.rope_sin = sin.get();
    a.q_values = values.get();
    a.q_scales = scales.get();
    a.weights = weights.get();
    a.recipe = to_abi(b.recipe);
    if (table_->query_quant(&a) != 0) fail("query_quant");
    return {values.download(), scales.download(), weights.download()};
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw Error(ErrorKind::kEnvironment, name() + ": " + what + " failed: " +
                                             (table_->last_error ? table_->last_error() : "(no message)"));
  }
  // A scoring call that failed on bad input (a NaN score, a length outside the row) is
  // the caller's bad input; anything else is the environment's.
  [[noreturn]] void fail_scoring(const char* what) const {
    throw Error(ErrorKind::kBadInput, name() + ": " + what + " failed: " +
                                          (scoring_->last_error ? scoring_->last_error() : "(no message)"));
  }
  const dsaf_kernel_v1* table_;
  void* library_;
  const dsaf_scoring_v1* scoring_;
  std::string name_;  // overrides the table's (our kernels: their spec)
};

// Our kernels' ABI table for a schedule known at run time: one instantiation per
// (width, grid cap, walk), chosen here.
template <int kLanes, int kMaxBlocks>
const dsaf_kernel_v1* builtin_table(KeyTileWalk walk) {
  switch (walk) {
    case KeyTileWalk::kBatchOrder: return abi_table<PluginBug::kCorrect, kLanes, kMaxBlocks, KeyTileWalk::kBatchOrder>("builtin");
    case KeyTileWalk::kTileOrder: return abi_table<PluginBug::kCorrect, kLanes, kMaxBlocks, KeyTileWalk::kTileOrder>("builtin");
    case KeyTileWalk::kHandOut: break;
  }
  return abi_table<PluginBug::kCorrect, kLanes, kMaxBlocks, KeyTileWalk::kHandOut>("builtin");
}

template <int kMaxBlocks>
const dsaf_kernel_v1* builtin_table(int lanes, KeyTileWalk walk) {
  switch (lanes) {
    case 1: return builtin_table<1, kMaxBlocks>(walk);
    case 2: return builtin_table<2, kMaxBlocks>(walk);
    case 4: return builtin_table<4, kMaxBlocks>(walk);
    case 8: return builtin_table<8, kMaxBlocks>(walk);
    default: return builtin_table<kAutoLanesPerHead, kMaxBlocks>(walk);
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
    } else if (knob == to_string(KeyTileWalk::kTileOrder)) {
      walk = KeyTileWalk::kTileOrder;
    } else if (knob == to_string(KeyTileWalk::kHandOut)) {
      walk = KeyTileWalk::kHandOut;
    } else {
      throw Error(ErrorKind::kBadInput, "kernel '" + spec + "': unknown knob '" + knob +
                                            "' (lanes 1, 2, 4, 8; grid1; batch-order, tile-order, hand-out)");
    }
  }
  const dsaf_kernel_v1* table = one_block ? builtin_table<1>(lanes, walk) : builtin_table<0>(lanes, walk);
  const bool fast = base == "builtin-fast";
  const dsaf_scoring_v1* scoring = fast ? abi_scoring_table<true>("builtin-fast (tensor-core logits)")
                                        : abi_scoring_table<false>("builtin");
  return std::make_unique<AbiKernel>(table, nullptr, scoring, spec);
}

}  // namespace

std::unique_ptr<KernelUnderTest> open_kernel(const std::string& spec) {
  const GpuInfo gpu = query_gpu();
  if (gpu.device_count == 0) {
    throw Error(ErrorKind::kEnvironment,
                "this needs a GPU: no CUDA device (" + (gpu.error.empty() ? "0 devices" : gpu.error) + ")");
  }
  if (auto builtin = open_builtin(spec)) return builtin;
  void* library = dlopen(spec.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) throw Error(ErrorKind::kEnvironment, "cannot load '" + spec + "': " + dlerror());
  const auto get = reinterpret_cast<dsaf_kernel_get_fn>(dlsym(library, "dsaf_kernel_get"));
  const dsaf_kernel_v1* table = get ? get(DSAF_KERNEL_ABI_VERSION) : nullptr;
  if (table == nullptr || table->abi_version != DSAF_KERNEL_ABI_VERSION || table->key_store == nullptr) {
    dlclose(library);
    throw Error(ErrorKind::kBadInput, "'" + spec + "' does not export dsaf_kernel_get for ABI version " +
                                          std::to_string(DSAF_KERNEL_ABI_VERSION));
  }
  const auto get_scoring = reinterpret_cast<dsaf_scoring_get_fn>(dlsym(library, "dsaf_scoring_get"));
  const dsaf_scoring_v1* scoring = get_scoring ? get_scoring(DSAF_SCORING_ABI_VERSION) : nullptr;
  if (scoring != nullptr && scoring->abi_version != DSAF_SCORING_ABI_VERSION) scoring = nullptr;
  return std::make_unique<AbiKernel>(table, library, scoring);
}

}  // namespace dsaf::dev
