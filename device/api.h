// File: api.h
// Host-side declarations of device/: compiles with g++ and includes no CUDA header,
// so the oracle and the CLI build without nvcc (they then report "device: not built").
// Kernels receive a recipe's numeric fields as the reference's plain-data
// ref::RecipeFields (argument structs and enums only: no arithmetic is shared with
// reference/).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reference/error.h"
#include "reference/recipe.h"

namespace dsaf::dev {

// What the CUDA runtime sees. Without a CUDA build: built = false.
struct GpuInfo {
  bool built = false;       // dsaf_device was compiled
  int device_count = 0;     // cudaGetDeviceCount (0 on error)
  std::string name;         // device 0
  int sm_major = 0;
  int sm_minor = 0;
  std::string error;        // why device_count is 0, if the runtime said
};

GpuInfo query_gpu();

// Lane-group widths (see launch_key_store below).
inline constexpr int kDefaultLanesPerHead = 8;
inline constexpr int kAutoLanesPerHead = 0;

// Fused key path, one launch (device/key_store/): for each token t,
//   k = input[t] (bf16 or fp32) -> norm -> RoPE(positions[t]) -> Hadamard -> quantise ->
//   paged store at page_tables[seq[t] * page_table_stride + positions[t] / P], offset
//   positions[t] % P, in the layout of reference/paged_cache.h.
// All pointers are device pointers. The RoPE table is [rope_positions][32] cos and sin
// (the reference's RopeTable, copied). Page tables are validated by the caller
// (launch_key_store checks nothing on the device side).
struct KeyStoreArgs {
  const void* input = nullptr;        // [num_tokens][128]
  bool input_bf16 = true;             // bf16 bits, else fp32
  int64_t num_tokens = 0;
  const int32_t* positions = nullptr;  // [num_tokens]
  const int32_t* seq = nullptr;        // [num_tokens] sequence of each token
  const int32_t* page_tables = nullptr;
  int64_t page_table_stride = 0;       // entries per sequence
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  const float* norm_weight = nullptr;  // [128] or null
  const float* norm_bias = nullptr;    // [128] or null
  uint8_t* cache = nullptr;            // num_pages * page bytes
  int page_size = 64;
  ref::RecipeFields recipe{};
};

// How the key kernel's persistent warps share out a batch. Tuning only: no schedule
// changes a byte of the cache (tests/device/key_store_gpu_test.cu and the device property
// check every kind), each changes the time. The kernel computes the batch in tiles of
// key_store_tile_tokens(recipe, lanes_per_head, input_bf16) consecutive tokens (the last one may be
// short), on persistent warps:
//  - batch order (no tile_order): warp g of W takes tiles g, g + W, g + 2W, ...;
//  - tile order: tile_order, a permutation of all [0, tiles) (build_key_tile_order builds
//    one, KeyTileOrderCache keeps one), and warp g takes the contiguous run
//    tile_order[g T / W .. (g + 1) T / W - 1] of the T tiles. A warp whose next tile has
//    exactly the positions of its current one keeps that tile's RoPE rows instead of
//    reading them again (256 bytes a token from L2, as many as the input). In a batched
//    prefill the sequences share positions 0, 1, 2, ..., so sorting tiles by position puts
//    tiles that share rows next to each other. The launcher cannot check the permutation
//    (it stays on the device, like the page tables): a tile_order that is not one leaves
//    tiles unwritten or written twice;
//  - hand-out (tile order + tile_counters): the runs cover all but the order's last
//    hand_out_tiles_per_warp x W tiles, which go one at a time to the warps that finish
//    their runs first. The counters are two int32 in device memory, zero before the first
//    launch that is given them; every launch leaves them zero, so one pair serves launch
//    after launch, though not two launches at once.
// docs/key-path-speed.md has what each costs and buys.
struct KeyStoreSchedule {
  int lanes_per_head = kAutoLanesPerHead;  // 1, 2, 4 or 8 lanes a head; auto: fastest_key_lanes
  int max_blocks = 0;      // grid cap (0: as many blocks as fit on the device at once)
  const int32_t* tile_order = nullptr;
  int tile_order_tokens = 0;  // the tile size tile_order was built for; checked at launch
  int32_t* tile_counters = nullptr;
  int hand_out_tiles_per_warp = 4;  // >= 1 (bench/key_store_bench.cu sweeps it)
};

// The walk a schedule takes (kernel specs and the device property name them).
enum class KeyTileWalk { kBatchOrder, kTileOrder, kHandOut };
const char* to_string(KeyTileWalk walk);

// Tile orders (build_key_tile_order's) and hand-out counters in device buffers kept from
// one build to the next, for a caller that launches batch after batch on stream 0 (the C
// ABI's "builtin" table keeps one per device: device/plugins/abi_kernels.cuh).
//  - build() enqueues one launch and does not wait for it; it points `schedule` at the
//    order (and, for kHandOut, at the counters; for kBatchOrder at neither, building
//    nothing). The order stays valid for launches enqueued before the next build() on this
//    object, which rewrites it: a caller that builds from several host threads must hold
//    one lock from build() until the launch that reads the order is enqueued.
//  - The buffers grow (to a power of two of tiles) and never shrink: a build of no more
//    tiles than an earlier one allocates nothing and does not synchronise. A growth waits
//    for the device once (launches enqueued earlier may read the old order), then frees.
//  - The order is written only when it can change: tiles whose keys (build_key_tile_order's)
//    never decrease get the identity, and a build with the previous build's tile count and
//    key bits whose keys all equal that build's keeps the order already there. The launch
//    decides, on the device; it sorts only tiles it has not seen sorted.
//  - The counters are zeroed when allocated; every launch leaves them zero (api.h
//    KeyStoreSchedule), so they serve every launch of this object's orders, one at a time.
//  - Bound to the device current at the first build (kBadInput on another). The destructor
//    waits for the device and frees the buffers.
// Throws as build_key_tile_order, and (kEnvironment) for CUDA errors.
class KeyTileOrderCache {
 public:
  KeyTileOrderCache() = default;
  ~KeyTileOrderCache();
  KeyTileOrderCache(const KeyTileOrderCache&) = delete;
  KeyTileOrderCache& operator=(const KeyTileOrderCache&) = delete;
  void build(const int32_t* positions, int64_t num_tokens, int tile_tokens, int rope_positions, KeyTileWalk walk,
             KeyStoreSchedule& schedule);

 private:
  int device_ = -1;
  int resident_blocks_ = 0;  // the order kernel's, on device_
  int64_t capacity_ = 0;     // tiles the buffers hold
  void* buffers_ = nullptr;  // the order, then build_key_tile_order's scratch, for capacity_ tiles
  int32_t* counters_ = nullptr;
  int64_t held_tiles_ = 0;  // tile count and key bits of the order in buffers_ (0: none)
  int held_bits_ = 0;
};

// Tokens per tile of the key kernel at a lane-group width (kAutoLanesPerHead: the width
// launch_key_store picks for the recipe and input): 32 / lanes.
int key_store_tile_tokens(const ref::RecipeFields& recipe, int lanes_per_head, bool input_bf16);
// Device scratch bytes build_key_tile_order needs.
size_t key_tile_order_scratch_bytes(int64_t num_tokens, int tile_tokens);
// Writes to `order` (device, ceil(num_tokens / tile_tokens) entries) the tiles of
// tile_tokens tokens sorted by the position of their first token, stably (equal positions
// keep batch order); positions in [0, rope_positions) sort by value, others by their low
// key_bits bits (those of rope_positions - 1), still into a permutation. Tiles whose keys
// never decrease (one sequence, say) are already in that order: the launch writes the
// identity and sorts nothing. The order depends on positions only: a serving stack builds it once per batch
// and uses it for every layer. Stream 0, one cooperative launch; the host does not wait,
// and nothing in `scratch` is read before it is written. Throws dsaf::Error (kBadInput)
// for num_tokens outside [1, 2^31), a tile size that is not 1, 2, 4, 8, 16 or 32,
// rope_positions below 1, or scratch smaller than key_tile_order_scratch_bytes.
void build_key_tile_order(const int32_t* positions, int64_t num_tokens, int tile_tokens, int rope_positions,
                          int32_t* order, void* scratch, size_t scratch_bytes);

// Query path (device/query_quant.cu), one lane group per (token, head):
//   q = input[t][h] -> RoPE(positions[t]) -> Hadamard -> quantise (per head), and
//   weights[t][h] = wproj[t][h] * H^-1/2 * D^-1/2 * q_scale (Recipe::weights_fold order).
// Outputs: q_values [T][H][value bytes of the query format], q_scales [T][H][scale bytes]
// (fp32 little-endian for fp8, ue8m0 x4 for fp4), weights [T][H] fp32.
struct QueryArgs {
  const void* input = nullptr;  // [T][H][128]
  bool input_bf16 = true;
  int64_t num_tokens = 0;
  int num_heads = 64;
  const int32_t* positions = nullptr;
  const float* wproj = nullptr;  // [T][H]
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  uint8_t* q_values = nullptr;
  uint8_t* q_scales = nullptr;
  float* weights = nullptr;
  ref::RecipeFields recipe{};
};

// Launchers (stream 0). They throw dsaf::Error (kBadInput) for arguments the kernels do
// not support and (kEnvironment) for CUDA errors, naming the call.
// `lanes_per_head` (1, 2, 4 or 8) is how many lanes share one 128-value head: a
// tuning knob with no effect on any result bit (device/head/head_io.cuh);
// bench/key_store_bench.cu measures them all. kAutoLanesPerHead picks the width measured
// fastest for the recipe and input dtype (fastest_key_lanes: bf16 input is staged, fp32
// input is not, and the fastest width differs), or for the query kernel
// kDefaultLanesPerHead.
int fastest_key_lanes(const ref::RecipeFields& recipe, bool input_bf16);
void launch_key_store(const KeyStoreArgs& args, const KeyStoreSchedule& schedule = {});
void launch_query_quant(const QueryArgs& args, int lanes_per_head = kAutoLanesPerHead);  // auto: 8
// Which key-kernel instantiation launch_key_store uses for a recipe: the name of the
// preset whose fields it compiles as constants (device/key_store/key_paths.cuh), or
// "generic".
std::string key_store_path(const ref::RecipeFields& recipe);

// Indexer logits over the paged key cache, exact-order (device/paged_logits.cu): for
// query row r of sequence row_seq[r] and key s < max_context,
//   logits[r][s] = k_scale[s] * sum_h ReLU(q[r][h] . k[s]) * weights[r][h]
// in reference/score.h's fp32 (or bf16) order, byte-equal to ref::index_scores, for
// s < row_valid[r]; keys from row_valid[r] on get -inf. Rows describe both layouts:
//   decode (DeepGEMM's mask): rows b * next_n + j, valid = min(ctx_b, ctx_b - next_n + j + 1)
//   ragged causal prefill: one row per query token at position p, valid = p + 1
// (decode_rows below builds the first). q is in its stored form (the query path's values
// and scales; an fp8 q's scale is already folded into the weights); the cache is
// reference/paged_cache.h's layout.
struct PagedLogitsArgs {
  const uint8_t* q_values = nullptr;  // [rows][H][value bytes of q_format]
  const uint8_t* q_scales = nullptr;  // [rows][H][scale bytes of q_format]
  const float* weights = nullptr;     // [rows][H]
  ref::StorageFormat q_format = ref::StorageFormat::kFp8E4m3fn;
  ref::StorageFormat k_format = ref::StorageFormat::kFp8E4m3fn;
  ref::ScoreAccum accum = ref::ScoreAccum::kFp32;  // kFp32 or kBf16
  int rows = 0;
  int num_heads = 64;                  // 8, 16, 32 or 64 (fast kernel: 16, 32, 64)
  const int32_t* row_seq = nullptr;    // [rows] the row's sequence (its page-table row)
  const int32_t* row_valid = nullptr;  // [rows] keys [0, valid) are scored, <= max_context
  const uint8_t* cache = nullptr;
  int page_size = 64;
  const int32_t* page_tables = nullptr;  // [sequences][page_table_stride]
  int64_t page_table_stride = 0;
  int64_t max_context = 0;  // logits row length
  float* logits = nullptr;  // [rows][max_context]
  // A hint, never a promise: consecutive rows share a sequence in runs of about this many
  // (a prefill chunk's or a study's queries; 1 for decode, next_n for multi-token decode).
  // From 4 on, the tensor-core kernel scores four rows a block over one copy of their keys;
  // the result is right whatever row_seq holds. 0: not known; the tensor-core launcher
  // then reads row_seq on the device and picks as shared_row_run_of would, with no copy
  // to the host (the plug-in ABI, which carries no hint).
  int shared_row_run = 1;
};
// The shared_row_run of a host copy of row_seq: 4 when at least half of the aligned groups
// of four rows each lie in one sequence, else 1.
inline int shared_row_run_of(const int32_t* host_row_seq, int rows) {
  int groups = 0, shared = 0;
  for (int first = 0; first + 4 <= rows; first += 4, ++groups) {
    const int32_t* g = host_row_seq + first;
    shared += g[0] == g[1] && g[0] == g[2] && g[0] == g[3];
  }
  return groups > 0 && 2 * shared >= groups ? 4 : 1;
}
// The same, computed on the device from a device row_seq by the kernel and into the word
// a launch with the hint 0 uses (tests compare the two); rows in [1, 65535].
int shared_row_run_on_device(const int32_t* row_seq, int rows);

// Host side: the (row_seq, row_valid) of a decode batch, next_n queries per sequence.
struct LogitRows {
  std::vector<int32_t> seq, valid;
};
inline LogitRows decode_rows(const std::vector<int32_t>& context_lens, int next_n) {
  LogitRows rows;
  for (size_t b = 0; b < context_lens.size(); ++b) {
    for (int j = 0; j < next_n; ++j) {
      const int32_t q_offset = context_lens[b] - next_n + j;  // the query's own position is valid
      rows.seq.push_back(static_cast<int32_t>(b));
      rows.valid.push_back(q_offset + 1 < context_lens[b] ? q_offset + 1 : context_lens[b]);
    }
  }
  return rows;
}
void launch_paged_logits(const PagedLogitsArgs& args);
// The same on tensor cores (device/paged_logits_mma.cu, sm_90a wgmma): fp8 cache with fp8
// queries (e4m3 MMA), or a bf16 cache with fp8 or bf16 queries (bf16 MMA); fp32
// accumulation, 16/32/64 heads; other formats are refused (kBadInput). BOUNDED, not
// byte-exact: the bounds and their derivation are in that file's header;
// tests/device/paged_logits_gpu_test.cu checks them on every score.
void launch_paged_logits_fast(const PagedLogitsArgs& args);

// ---- Top-K (device/topk/) ----------------------------------------------------------------
// Exact, deterministic top-K per row, equal to ref::select_topk (reference/topk.h) index for
// index: higher score first, equal scores by lower index (-0.0 and +0.0 are equal scores);
// row r gets the first min(k, len_r) positions of that order, in that order (or the same
// positions in ascending order, TopKOrder::kByIndex), then -1. Scores are compared as fp32
// values through their bits (subnormals kept, no flush to zero). A NaN among a row's valid
// scores is bad input: that row gets all -1 and status kNaN.
inline constexpr int kTopKMaxK = 2048;
inline constexpr int kTopKMaxRowLength = 1 << 20;  // 1,048,576 positions (1M-token contexts)

enum class TopKRowStatus : int32_t { kOk = 0, kNaN = 1, kBadLength = 2, kInternal = 3 };

// The order of a row's selected positions. Both are functions of the row alone (the same
// bits on every launch and blocks_per_row); kByIndex is the set a sparse-attention gather
// reads, in the order it reads it, without the kernel's final sort by score.
enum class TopKOrder : int32_t {
  kByScore = 0,  // ref::select_topk's order: higher score first, equal scores lower index first
  kByIndex = 1,  // the same positions, ascending
};

struct TopKArgs {
  const float* scores = nullptr;           // row r starts at scores + r * row_stride
  int64_t row_stride = 0;                  // floats; at least every row's valid length
  int rows = 0;
  const int32_t* valid_lengths = nullptr;  // [rows]: positions [0, len) are valid; null: row_stride
  int k = 0;                               // 1 .. kTopKMaxK
  int32_t* indices = nullptr;              // [rows][k]
  int32_t* row_status = nullptr;           // optional [rows] TopKRowStatus, see launch_topk
  TopKOrder order = TopKOrder::kByScore;
};

// Stream 0. Throws kBadInput for k outside [1, kTopKMaxK] and other unsupported arguments.
// Without args.row_status it synchronises and throws kBadInput naming the first row with a
// NaN score or a valid length outside [0, min(row_stride, kTopKMaxRowLength)] (kInternal if
// a self-check failed). With args.row_status it does not synchronise: the kernel writes each
// row's TopKRowStatus there for the caller to check. `blocks_per_row` is a tuning knob with
// no effect on any output bit: 0 = automatic; 1, 2, 4, 8: a thread-block cluster per row;
// kTopKGrid + G (G = 1, 2, 4, ..., 128): G blocks a row in one cooperative grid, each
// holding at most 32,768 of the row's scores, exchanging through global memory (needs
// row_stride <= 32,768 G and rows x G blocks resident at once; kBadInput otherwise).
inline constexpr int kTopKAutoBlocksPerRow = 0;
inline constexpr int kTopKGrid = 1 << 16;
void launch_topk(const TopKArgs& args, int blocks_per_row = kTopKAutoBlocksPerRow);
// The rows' statuses a launch with args.row_status wrote, checked as the synchronous launch
// checks them: returns when every row is kOk, else throws for the first row that is not.
void check_topk_row_statuses(const std::vector<int32_t>& statuses, int64_t row_stride);

}  // namespace dsaf::dev

namespace dsaf::dev {

// ---- Kernel under test: our kernels or a plug-in (device/kernel_abi.h), on host data ----

// One key-path batch in host memory (the layouts of KeyStoreArgs).
struct HostKeyBatch {
  std::vector<uint16_t> input_bf16;  // [T][128] bf16 bits, or
  std::vector<float> input_f32;      // [T][128] fp32 (exactly one of the two is used)
  bool bf16 = true;
  std::vector<int32_t> positions, seq, page_tables;
  int64_t page_table_stride = 0;
  int page_size = 64;
  std::vector<float> rope_cos, rope_sin;  // [positions][32]
  std::vector<float> norm_weight, norm_bias;
  std::vector<uint8_t> cache;             // initial bytes (num_pages * page bytes)
  ref::RecipeFields recipe{};
  // The caller's count of tokens whose position an earlier token of the batch has
  // (repeated_positions_of gives it), or -1: not given. Our kernels take a given count
  // natively and walk a batch that repeats few positions in batch order (the tile order
  // shares RoPE rows between tiles of equal positions, for the price of building it); the
  // ABI carries no count, so a plug-in never sees it, and with -1 our kernels too are
  // called through the ABI, in the walk their spec names. The cache bytes are the same
  // either way.
  int64_t repeated_positions = -1;
};
// The repeated_positions of host positions: the tokens after the first of each position;
// -1 for a negative position (no count: the kernel reports it).
inline int64_t repeated_positions_of(std::vector<int32_t> positions) {
  std::sort(positions.begin(), positions.end());
  if (!positions.empty() && positions.front() < 0) return -1;
  return static_cast<int64_t>(positions.end() - std::unique(positions.begin(), positions.end()));
}

struct HostQueryBatch {
  std::vector<uint16_t> input_bf16;  // [T][H][128]
  int64_t num_tokens = 0;
  int num_heads = 64;
  std::vector<int32_t> positions;
  std::vector<float> wproj;  // [T][H]
  std::vector<float> rope_cos, rope_sin;
  ref::RecipeFields recipe{};
};

struct HostQueryResult {
  std::vector<uint8_t> values, scales;
  std::vector<float> weights;
};

// Paged logits on host data (the layouts of PagedLogitsArgs).
struct HostLogitsBatch {
  std::vector<uint8_t> q_values, q_scales;
  std::vector<float> weights;
  ref::StorageFormat q_format = ref::StorageFormat::kFp8E4m3fn;
  ref::StorageFormat k_format = ref::StorageFormat::kFp8E4m3fn;
  ref::ScoreAccum accum = ref::ScoreAccum::kFp32;
  int num_heads = 64;
  std::vector<int32_t> row_seq, row_valid;
  std::vector<uint8_t> cache;
  int page_size = 64;
  std::vector<int32_t> page_tables;
  int64_t page_table_stride = 0;
  int64_t max_context = 0;
  // The caller's row-run hint (PagedLogitsArgs::shared_row_run; shared_row_run_of gives it
  // from row_seq), or 0: not given. Our kernels ("builtin", "builtin-fast") take a given
  // hint natively, as a serving caller that knows its rows would; the plug-in ABI carries
  // none, so a plug-in never sees it, and with 0 our kernels too are called through the ABI
  // (the fast logits then routed on the device). The logits are the same either way.
  int shared_row_run = 0;
};

// Top-K on host data (the layouts of TopKArgs).
struct HostTopKBatch {
  std::vector<float> scores;  // [rows][row_stride]
  int64_t row_stride = 0;
  std::vector<int32_t> valid_lengths;  // [rows]
  int k = 0;
};

// The top-K contracts of kernel_abi.h (DSAF_TOPK_*; docs/verify.md), and what fills the
// entries of a row past min(k, length).
enum class TopKContract : int32_t { kOrdered = 0, kSet = 1, kSetTies = 2 };
enum class TopKPadding : int32_t { kMinusOne = 0, kUnread = 1 };

// What a kernel provides and supports (kernel_abi.h dsaf_kernel_v2; a version-1 plug-in
// has a key store, every format, page size and input dtype, fp32 norm parameters, and its
// dsaf_scoring_v1's entries under the ordered top-K contract).
struct KernelCapabilities {
  bool key_store = false, query_path = false, paged_logits = false, topk = false;
  uint32_t store_formats = 0;  // bit f: ref::StorageFormat f
  uint32_t page_sizes = 0;     // bit p: pages of 2^p tokens
  bool bf16_input = false, fp32_input = false;
  bool norm_params_bf16 = false;  // the kernel takes the norm weight, bias and head weights in bf16
  int64_t max_position = 0;       // 0: no limit
  int64_t max_tokens = 0;         // per call; 0: no limit
  bool logits_exact_order = true;  // else bounded
  TopKContract topk_contract = TopKContract::kOrdered;
  TopKPadding topk_padding = TopKPadding::kMinusOne;
  int topk_k = 0;  // the one K it supports; 0: any of 1..kTopKMaxK

  bool stores(ref::StorageFormat f) const { return (store_formats >> static_cast<int>(f)) & 1u; }
  bool takes_page_size(int p) const {
    for (int e = 0; e <= 8; ++e) {
      if (p == 1 << e) return (page_sizes >> e) & 1u;
    }
    return false;
  }
};

class KernelUnderTest {
 public:
  virtual ~KernelUnderTest() = default;
  virtual std::string name() const = 0;
  virtual KernelCapabilities capabilities() const = 0;
  // Runs the key path on the batch; returns the cache bytes after it.
  virtual std::vector<uint8_t> key_store(const HostKeyBatch& batch) const = 0;
  virtual HostQueryResult query_quant(const HostQueryBatch& batch) const = 0;
  virtual std::vector<float> paged_logits(const HostLogitsBatch& batch) const = 0;  // [rows][max_context]
  virtual std::vector<int32_t> topk(const HostTopKBatch& batch) const = 0;          // [rows][k]
  // The device time of the last call's entry point: CUDA events recorded on stream 0
  // before and after it (uploads and downloads excluded; a plug-in's work on other
  // streams counts as far as the legacy default stream orders it). 0 when not measured.
  virtual double last_device_ms() const { return 0.0; }
  // The host time the call held its caller (steady clock, around the entry point; under
  // warm timing, around an untimed call after the first). A call that returns once its work is queued
  // spends it on the host's side of its launches; a call that waits for the device
  // includes the wait. 0 when not measured.
  virtual double last_host_ms() const { return 0.0; }
  // Steady-state timing (the studies): every entry point then runs twice more, untimed, just
  // before the timed call and on the same device buffers. The entry points write their
  // outputs from their inputs alone, so the outputs are the same; the device has not idled
  // between the two calls, so last_device_ms is the call at speed and not after the clocks
  // fell while the batch was uploaded. The timed call's start event is queued behind a
  // short kernel that holds the device while the host queues the call, so that the host's
  // latency to the call's first launch is not device time (a call that waits for the
  // device inside has its gaps after the wait counted). Off by default (verify times one
  // call from an idle device).
  void set_warm_timing(bool warm) { warm_timing_ = warm; }

 protected:
  bool warm_timing_ = false;
};

// A device-to-device copy's bandwidth in GB/s (bytes read plus bytes written, per
// second; the best of a few copies of 1 GiB): the roofline the studies' timings are
// judged against. Defined only in CUDA builds; throws dsaf::Error(kEnvironment) without a
// CUDA device.
double copy_bandwidth_gbps();

// Device 0's dense arithmetic peaks in TFLOP/s (a multiply-add counts 2): SMs x its peak SM
// clock (cudaDevAttrClockRate) x its architecture's rate per SM and clock. Known for
// compute capability 9.x (Hopper): fp8 tensor cores 8,192 (NVIDIA's H100 SXM figure of
// 1,979 dense TFLOPS is 132 SMs x 1,830 MHz x 8,192), bf16 4,096, fp32 FMA 256 (128
// lanes); 0 elsewhere (unknown: no compute floor is reported). At the peak clock, not the
// spec sheet's, so a fraction of these is never flattered. Defined only in CUDA builds;
// throws dsaf::Error(kEnvironment) without a CUDA device.
struct ComputePeaks {
  int sms = 0;
  double clock_ghz = 0.0;
  double tensor_fp8_tflops = 0.0, tensor_bf16_tflops = 0.0, fp32_tflops = 0.0;
};
ComputePeaks compute_peaks();

// Our kernels, "builtin" (exact-order logits) or "builtin-fast" (the tensor-core logits
// kernel), each optionally followed by schedule knobs separated by ':' — a width 1, 2, 4
// or 8 (lanes per head; default: the fastest), "grid1" (the key kernel's grid capped at
// one block, so that its warps walk many tiles), and "batch-order", "tile-order" or
// "hand-out" (the tile walk, KeyStoreSchedule; default: hand-out, the schedule of the
// published speeds), and "by-index" (top-K rows as positions in ascending order,
// TopKOrder::kByIndex, under the set contract; default: by score, ordered) — e.g.
// "builtin:2:grid1:batch-order" or "builtin-fast:by-index"; or the path of a plug-in shared
// library. Throws dsaf::Error (kEnvironment) without a CUDA device or when the library
// cannot be loaded, (kBadInput) for an unknown knob or when the library does not export
// dsaf_kernel_get for ABI version 2 or 1. Our kernels speak version 2. Defined only in
// CUDA builds.
std::unique_ptr<KernelUnderTest> open_kernel(const std::string& spec);
// What open_kernel does short of asking for the GPU: a builtin spec's knobs, or a plug-in's
// library loaded (its static constructors run), its dsaf_kernel_get called and its table
// checked; throws as open_kernel. Touches no CUDA itself, so that the CLI can run it in a
// child process first (cli/kernel_open.h): a plug-in that crashes or hangs while loading
// ends the child, not the CLI.
void probe_kernel(const std::string& spec);

}  // namespace dsaf::dev
