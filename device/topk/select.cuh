// File: select.cuh — exact, deterministic top-K per row (api.h TopKArgs), the device twin of
// ref::select_topk (reference/topk.h). No arithmetic: scores are compared through their
// bit patterns, so the result is the reference's to the bit, with no rounding to bound.
//
// Order. Score s at position i of a row gets the 52-bit composite
//   c = order_key(s) << 20 | (2^20 - 1 - i),
// where order_key maps fp32 bits to a uint32 with the order of the floats (positives: sign
// bit set; negatives: all bits flipped) after -0.0 is made +0.0, since the reference compares
// doubles and -0.0 == +0.0 there (a tie, broken by index). Subnormals keep their bits (no
// flush to zero: nothing is computed in floating point). Composites are distinct within a
// row, and c(a) > c(b) exactly when the reference puts a before b, so the top K is the K
// largest composites, and the output order is the composites in descending order.
//
// Algorithm: one thread-block cluster of kCluster blocks (1, 2, 4 or 8) per row, or (the
// grid path, at the end of this file) G blocks per row in one cooperative grid; block r
// owns the r-th contiguous slice of the row. Every pass reads the elements still "in play"
// and each block keeps its own histogram in shared memory; the blocks read one another's
// histograms through distributed shared memory (DSMEM; the grid path: a row histogram in
// global memory, or, for at most 4 blocks a row, tagged words), so every block picks the
// same digit. Radix select, most significant
// digit first, over the five digit fields
//   composite bits [51:41] [40:30] [29:20] (the score) [19:10] [9:0] (the index)
// 1. Pass 0 reads the whole row (float4 where aligned), flags NaN, histograms field 0.
// 2. After each histogram the cluster sums it and finds the bin b holding the remaining-th
//    largest composite among those in play. Elements in play with a digit above b are
//    selected by the next pass; those with digit b stay in play; the rest drop out. When
//    every element of bin b is needed, the next pass is the last: it selects digit >= b.
//    Otherwise the next pass histograms the next field. Composites are distinct, so bin b
//    of field 4 always holds exactly the one element still needed: at most 6 passes.
// 3. A pass that reads the row from global memory also copies the elements it passes to
//    the next level into a shared buffer, when this block's count (known from the previous
//    histogram) fits in kBufferCapacity. Later passes read the buffer instead of the row.
//    When the count does not fit, the next pass reads the row again: an overflowing
//    candidate set costs a pass over the row, never an element (docs/numerics.md §5.5 is the
//    upstream kernel that drops them). Pass 0 of a slice larger than the buffer cannot know
//    its bin yet, so it buffers speculatively: one score a thread estimates the smallest
//    field-0 digit t whose elements fill at most half the buffer, and pass 0 buffers every
//    digit >= t. If the chosen bin b is >= t and nothing overflowed, the buffer holds all
//    that is still in play (and some that drops out, digits in [t, b)), and pass 1 reads it
//    instead of the row; otherwise pass 1 reads the row. The sample decides speed only.
// 4. Every block reads every block's selection count and self-check flags, so all reach
//    the same verdict. By score (TopKOrder::kByScore): block 0 gathers the selected
//    composites of the cluster (at most kTopKMaxK), sorts them in descending order (CUB's
//    block merge sort, one a thread for K <= 1024, else two) and writes the indices. By
//    index: the slices are contiguous ranges of positions in rank order, so each block
//    writes its own selection, ascending, after the selections of the blocks before it
//    (mark_selection, write_marked: a bitmap, no sort). Block 0 writes -1 after the valid count.
// Determinism: the selected set is a function of the row only, and sorting distinct
// composites (or distinct positions) has one result, so the unordered shared-memory
// appends (atomicAdd slots) and the slice split never show in the output; every
// blocks_per_row gives the same bits.
//
// NaN: a NaN among a row's valid scores is bad input, as in the reference. The row's
// indices are all -1 and its status is TopKRowStatus::kNaN; launch_topk throws kBadInput
// naming the first such row unless the caller takes the statuses (TopKArgs::row_status).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cub/block/block_merge_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "device/api.h"
#include "device/launch.h"

namespace dsaf::dev::topk_select {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kIndexBits = 20;  // the index field of the composite
static_assert(kTopKMaxRowLength == 1 << kIndexBits, "every index fits the composite's index field");
constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;
constexpr int kDigitBits = 11;          // the widest digit field
constexpr int kBins = 1 << kDigitBits;  // 2048 counters, 8 KB per histogram
static_assert(kBins == 2 * kThreads, "the bin search gives each thread two adjacent bins");
constexpr int kNumFields = 5;
// 16384 candidates (128 KB): at least the 2048-entry sort array the buffer doubles as, and
// with the histograms and the selection ~164 KB of the 227 KB a block may have on sm_90.
constexpr int kBufferCapacity = 16384;
static_assert(kBufferCapacity >= kTopKMaxK, "block 0 sorts the selection in the buffer");
// float4 loads in flight per thread. With one block per row a grid of few rows streams
// through few SMs, each needing many bytes in flight; the cluster variants spread a row
// over more SMs, and at 4 they spill under the 64-register cap of 1024 threads (ptxas -v).
template <int kCluster>
constexpr int kVectorUnroll = kCluster == 1 ? 4 : 2;
// Below this many scores per block, the cluster barriers cost more than the extra blocks save.
constexpr int64_t kMinScoresPerBlock = 16384;

struct Field {
  int shift;
  int width;
};
// The digit fields, most significant first: 11 + 11 + 10 score bits, 10 + 10 index bits.
__host__ __device__ constexpr Field field(int f) {
  return f == 0 ? Field{41, 11} : f == 1 ? Field{30, 11} : f == 2 ? Field{20, 10} : f == 3 ? Field{10, 10} : Field{0, 10};
}
static_assert(field(0).shift + field(0).width == 32 + kIndexBits, "field 0 starts at the composite's top bit");
static_assert(field(1).shift + field(1).width == field(0).shift &&
                  field(2).shift + field(2).width == field(1).shift &&
                  field(3).shift + field(3).width == field(2).shift &&
                  field(4).shift + field(4).width == field(3).shift,
              "the fields are adjacent");
static_assert(field(2).shift == kIndexBits && field(4).shift == 0, "score fields end at the index field; 4 ends at 0");

// Which elements a pass looks at, as masks over the composite (T = uint64_t), or over the
// order key alone (T = uint32_t: the masks shifted down by kIndexBits) when no mask and no
// digit touches the index field, so the hot passes over the row skip 64-bit arithmetic.
// An element is in play when (x & mask_in) == value_in. In play and
//   (x & mask_sel) >  value_sel: selected;
//   (x & mask_sel) == value_sel: counted in the histogram (and buffered), or selected in
//                                the final pass.
template <class T>
struct Plan {
  T mask_in, value_in, mask_sel, value_sel;
  int digit_shift;
  uint32_t digit_mask;
  bool buffer;           // copy the histogrammed elements of digit >= buffer_from into the buffer
  uint32_t buffer_from;  // 0, or pass 0's speculative threshold (step 3)
};

struct Scalars {
  uint32_t selected_count;
  uint32_t buffered_count;
  uint32_t has_nan;
  uint32_t overflow;         // the selection would have overflowed: a bug, reported as kInternal
  uint32_t buffer_overflow;  // the buffer would have: a bug, unless the buffering was speculative
  uint32_t bin, above, bin_total;
  uint32_t threshold;        // the speculative buffer's digit (kBins: none)
  uint32_t in_range;         // grid path: the elements a pass over the keys selects or counts
};

using BlockScan = cub::BlockScan<uint32_t, kThreads>;
// The final order: kTopKMaxK composites, two a thread (blocked: thread t holds ranks 2t, 2t+1).
constexpr int kSortItems = kTopKMaxK / kThreads;
static_assert(kSortItems * kThreads == kTopKMaxK, "the sort holds every selected composite");
using BlockSort = cub::BlockMergeSort<uint64_t, kThreads, kSortItems>;
// For K <= kThreads the selection (at most K composites) sorts one a thread: the same
// rounds with half the work in each.
using BlockSortShort = cub::BlockMergeSort<uint64_t, kThreads, 1>;

struct Smem {
  static constexpr uint32_t kBufferSlots = kBufferCapacity;
  uint64_t buffer[kBufferCapacity];  // candidates in play; at the end block 0's gathered selection
  uint64_t selected[kTopKMaxK];      // this block's selected composites, unordered
  union {
    uint32_t hist[2][kBins];           // alternate passes: peers may still read the last one
    BlockSort::TempStorage sort;       // after the last pass (block 0)
    BlockSortShort::TempStorage sort_short;
  };
  Scalars s;
  BlockScan::TempStorage scan;
};

static_assert(sizeof(Smem) <= 227 * 1024, "sm_90's dynamic shared memory limit per block");
static_assert(sizeof(Smem::buffer) * 8 >= kTopKMaxRowLength, "mark_selection: a bit for every position of a row");

__device__ __forceinline__ uint32_t order_key(uint32_t bits) {
  bits = bits == 0x8000'0000u ? 0u : bits;  // -0.0 -> +0.0: equal scores in the reference
  const uint32_t flip = static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x8000'0000u;
  return bits ^ flip;
}

__device__ __forceinline__ uint64_t composite(uint32_t key, int index) {
  return static_cast<uint64_t>(key) << kIndexBits | (kIndexMask - static_cast<uint32_t>(index));
}

// ---- Cluster helpers; a cluster of one block is the block itself --------------------------
template <int kCluster>
__device__ __forceinline__ int block_rank() {
  if constexpr (kCluster == 1) {
    return 0;
  } else {
    return static_cast<int>(cg::this_cluster().block_rank());
  }
}

// A barrier over the cluster, with release/acquire order for shared memory (a block
// barrier when kCluster == 1).
template <int kCluster>
__device__ __forceinline__ void cluster_barrier() {
  if constexpr (kCluster == 1) {
    __syncthreads();
  } else {
    cg::this_cluster().sync();
  }
}

template <int kCluster, class T>
__device__ __forceinline__ T* peer(T* local, int rank) {
  if constexpr (kCluster == 1) {
    return local;
  } else {
    return cg::this_cluster().map_shared_rank(local, static_cast<unsigned>(rank));
  }
}

// ---- One element --------------------------------------------------------------------------
// One atomicAdd per group of lanes appending together (the slots' order is free: the output
// is sorted, and the buffer is a set).
__device__ __forceinline__ void append(uint64_t* array, uint32_t* count, uint32_t capacity, uint64_t c,
                                       uint32_t* overflow) {
  const cg::coalesced_group group = cg::coalesced_threads();
  uint32_t base = 0;
  if (group.thread_rank() == 0) base = atomicAdd(count, group.size());
  const uint32_t slot = group.shfl(base, 0) + group.thread_rank();
  if (slot < capacity) {
    array[slot] = c;
  } else {
    *overflow = 1u;
  }
}

// Sm: Smem or GridSmem (the same members: selected, buffer, s; kBufferSlots).
template <bool kFinal, class T, class Sm>
__device__ __forceinline__ void visit(T x, uint64_t c, const Plan<T>& p, uint32_t* hist, Sm& sm) {
  if ((x & p.mask_in) != p.value_in) return;
  const T high = x & p.mask_sel;
  if (high > p.value_sel || (kFinal && high == p.value_sel)) {
    append(sm.selected, &sm.s.selected_count, kTopKMaxK, c, &sm.s.overflow);
    return;
  }
  if constexpr (!kFinal) {
    if (high == p.value_sel) {
      const uint32_t digit = static_cast<uint32_t>(x >> p.digit_shift) & p.digit_mask;
      atomicAdd(&hist[digit], 1u);
      if (p.buffer && digit >= p.buffer_from) {
        append(sm.buffer, &sm.s.buffered_count, Sm::kBufferSlots, c, &sm.s.buffer_overflow);
      }
    }
  }
}

// Returns whether the score is a NaN.
template <bool kFinal, class T>
__device__ __forceinline__ bool visit_score(float score, int index, const Plan<T>& p, uint32_t* hist, Smem& sm) {
  const uint32_t bits = __float_as_uint(score);
  const uint32_t key = order_key(bits);
  const uint64_t c = composite(key, index);
  if constexpr (sizeof(T) == sizeof(uint32_t)) {
    visit<kFinal>(key, c, p, hist, sm);
  } else {
    visit<kFinal>(c, c, p, hist, sm);
  }
  return (bits & 0x7FFF'FFFFu) > 0x7F80'0000u;
}

// ---- Passes -------------------------------------------------------------------------------
// This block's part of the row: the scalar head up to the first 16-byte boundary (block 0),
// a contiguous range of float4 vectors, and the scalar tail (last block).
struct Slice {
  const float* row;
  int head;                  // scores [0, head) are scalar
  int vec_begin, vec_end;    // this block's float4 vectors; vector v holds head + 4v .. +3
  int tail_begin, tail_end;  // scalar scores after the last vector
  bool has_head, has_tail;
  uint32_t count;            // scores this block reads: positions [begin(), end()), in rank order
  __device__ int begin() const { return has_head ? 0 : head + 4 * vec_begin; }
  __device__ int end() const { return has_tail ? tail_end : head + 4 * vec_end; }
};

// Block `rank` of `blocks` (the blocks of a row): contiguous slices in rank order.
__device__ Slice make_slice(const float* row, int n, int rank, int blocks) {
  Slice s;
  s.row = row;
  const auto address = reinterpret_cast<uintptr_t>(row);  // float-aligned
  s.head = min(n, static_cast<int>(((16 - (address & 15)) & 15) / sizeof(float)));
  const int vectors = (n - s.head) / 4;
  s.vec_begin = static_cast<int>(static_cast<int64_t>(vectors) * rank / blocks);
  s.vec_end = static_cast<int>(static_cast<int64_t>(vectors) * (rank + 1) / blocks);
  s.tail_begin = s.head + 4 * vectors;
  s.tail_end = n;
  s.has_head = rank == 0;
  s.has_tail = rank == blocks - 1;
  s.count = 4u * (s.vec_end - s.vec_begin) + (s.has_head ? s.head : 0) + (s.has_tail ? n - s.tail_begin : 0);
  return s;
}

// Calls take(score, position) for every score of the slice: block 0's scalar head, the last
// block's scalar tail, then the float4 vectors, kUnroll a thread at a time with their loads
// first, so that kUnroll are in flight. kStream: evict-first loads (a slice read once).
template <int kUnroll, bool kStream, class Take>
__device__ __forceinline__ void for_each_score(const Slice& s, Take&& take) {
  const int tid = threadIdx.x;
  if (s.has_head && tid < s.head) take(s.row[tid], tid);
  if (s.has_tail && s.tail_begin + tid < s.tail_end) take(s.row[s.tail_begin + tid], s.tail_begin + tid);
  const float4* vectors = reinterpret_cast<const float4*>(s.row + s.head);
  for (int v0 = s.vec_begin + tid; v0 < s.vec_end; v0 += kThreads * kUnroll) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float4* at = vectors + v0 + u * kThreads;
      if (v0 + u * kThreads < s.vec_end) x[u] = kStream ? __ldcs(at) : __ldg(at);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * kThreads;
      if (v < s.vec_end) {
        const int i = s.head + 4 * v;
        take(x[u].x, i);
        take(x[u].y, i + 1);
        take(x[u].z, i + 2);
        take(x[u].w, i + 3);
      }
    }
  }
}

template <bool kFinal, int kUnroll, class T>
__device__ void scan_row(const Slice& s, const Plan<T>& p, uint32_t* hist, Smem& sm) {
  bool nan = false;
  for_each_score<kUnroll, false>(s, [&](float score, int i) { nan |= visit_score<kFinal>(score, i, p, hist, sm); });
  if (nan) sm.s.has_nan = 1u;
}

template <bool kFinal, class Sm>
__device__ void scan_buffer(uint32_t count, const Plan<uint64_t>& p, uint32_t* hist, Sm& sm) {
  for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
    const uint64_t c = sm.buffer[i];
    visit<kFinal>(c, c, p, hist, sm);
  }
}

// Appends the lane's elements flagged in `mask` (bit b: element b, composite comp(b)) with
// one atomicAdd a warp: a prefix sum of the lanes' counts over the warp gives each lane its
// first slot. Every lane of the warp calls it, converged.
template <int kElements, class Comp>
__device__ __forceinline__ void warp_append(uint64_t* array, uint32_t* count, uint32_t capacity, uint32_t mask,
                                            Comp comp, uint32_t* overflow) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const uint32_t n = __popc(mask);
  if (__ballot_sync(~0u, n != 0) == 0) return;
  uint32_t inclusive = n;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const uint32_t below = __shfl_up_sync(~0u, inclusive, d);
    if (lane >= d) inclusive += below;
  }
  uint32_t base = 0;
  if (lane == 31) base = atomicAdd(count, inclusive);
  uint32_t slot = __shfl_sync(~0u, base, 31) + inclusive - n;
  // Only the flagged elements: a pass flags a few in a hundred, so the warp loops as often
  // as its lane with the most, not kElements times with every composite built.
  static_assert(kElements <= 32, "one bit an element");
  for (uint32_t left = mask; left != 0; left &= left - 1) {
    if (slot < capacity) {
      array[slot] = comp(__ffs(static_cast<int>(left)) - 1);
    } else {
      *overflow = 1u;
    }
    ++slot;
  }
}

__device__ __forceinline__ float component(const float4& x, int e) {
  return e == 0 ? x.x : e == 1 ? x.y : e == 2 ? x.z : x.w;
}

// Pass 0: every element is in play and none is selected yet (the plan's masks are 0), so
// each score only counts in the histogram of the order key's top field and, at or above
// the speculative threshold, goes to the buffer. The loop drops the plan's masks and the
// selection, and a warp appends its buffered scores with one atomicAdd. The vector loop's
// trip count is the warp's, so the appends find the warp converged.
template <int kUnroll>
__device__ void scan_row_first(const Slice& s, const Plan<uint32_t>& p, uint32_t* hist, Smem& sm) {
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  bool nan = false;
  if (s.has_head && tid < s.head) nan |= visit_score<false>(s.row[tid], tid, p, hist, sm);
  if (s.has_tail && s.tail_begin + tid < s.tail_end) {
    nan |= visit_score<false>(s.row[s.tail_begin + tid], s.tail_begin + tid, p, hist, sm);
  }
  const float4* vectors = reinterpret_cast<const float4*>(s.row + s.head);
  for (int w0 = s.vec_begin + tid - lane; w0 < s.vec_end; w0 += kThreads * kUnroll) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = w0 + lane + u * kThreads;
      x[u] = v < s.vec_end ? __ldg(vectors + v) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    uint32_t buffered = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (w0 + lane + u * kThreads >= s.vec_end) continue;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t bits = __float_as_uint(component(x[u], e));
        nan |= (bits & 0x7FFF'FFFFu) > 0x7F80'0000u;
        const uint32_t digit = (order_key(bits) >> p.digit_shift) & p.digit_mask;
        atomicAdd(&hist[digit], 1u);
        if (p.buffer && digit >= p.buffer_from) buffered |= 1u << (4 * u + e);
      }
    }
    warp_append<4 * kUnroll>(
        sm.buffer, &sm.s.buffered_count, kBufferCapacity, buffered,
        // b is known only at run time: the score is picked by a chain of PTX selects, since
        // nvcc 13 turns the same selects written in C++ back into an array indexed by b, held
        // in local memory (ptxas -v: a stack frame; SASS: STL/LDL in the loop).
        [&](int b) {
          uint32_t bits = 0;
#pragma unroll
          for (int e = 0; e < 4 * kUnroll; ++e) {
            const uint32_t candidate = __float_as_uint(component(x[e / 4], e % 4));
            asm("{ .reg .pred p; setp.eq.s32 p, %2, %3; selp.b32 %0, %1, %0, p; }"
                : "+r"(bits) : "r"(candidate), "r"(b), "r"(e));
          }
          const int v = w0 + lane + (b / 4) * kThreads;
          return composite(order_key(bits), s.head + 4 * v + b % 4);
        },
        &sm.s.buffer_overflow);
  }
  if (nan) sm.s.has_nan = 1u;
}

// Whether a pass needs the order key alone: no mask and no digit of its plan touches the
// index field. Then on_key is the plan shifted down to the key.
__device__ __forceinline__ bool needs_key_only(const Plan<uint64_t>& p, bool final) {
  return (p.mask_sel & kIndexMask) == 0 && (final || p.digit_shift >= kIndexBits);
}

template <bool kFinal>
__device__ __forceinline__ Plan<uint32_t> on_key(const Plan<uint64_t>& p) {
  return Plan<uint32_t>{static_cast<uint32_t>(p.mask_in >> kIndexBits),
                        static_cast<uint32_t>(p.value_in >> kIndexBits),
                        static_cast<uint32_t>(p.mask_sel >> kIndexBits),
                        static_cast<uint32_t>(p.value_sel >> kIndexBits),
                        kFinal ? 0 : p.digit_shift - kIndexBits,
                        p.digit_mask,
                        p.buffer,
                        p.buffer_from};
}

// The pass over the row, on the order key alone when the plan allows it.
template <bool kFinal, int kCluster>
__device__ void scan_row_plan(const Slice& s, const Plan<uint64_t>& p, uint32_t* hist, Smem& sm) {
  const bool key_only = needs_key_only(p, kFinal);
  if (key_only) {
    const Plan<uint32_t> narrow = on_key<kFinal>(p);
    if (!kFinal && p.mask_in == 0 && p.mask_sel == 0) {
      scan_row_first<kVectorUnroll<kCluster>>(s, narrow, hist, sm);
    } else {
      scan_row<kFinal, kVectorUnroll<kCluster>>(s, narrow, hist, sm);
    }
  } else {
    scan_row<kFinal, kVectorUnroll<kCluster>>(s, p, hist, sm);
  }
}

// Pass 0's speculative threshold (step 3): from one score a thread, spread evenly over the
// slice, the smallest field-0 digit d whose estimated count of slice scores with digits >= d
// (the samples with digits >= d, times slice scores / samples) is at most half the buffer;
// kBins when even the top bin's estimate is more.
// Sample counts are summed from the top bin down as in find_bin. Writes sm.s.threshold.
__device__ void sample_threshold(const Slice& s, uint32_t* sample_hist, Smem& sm) {
  const int tid = threadIdx.x;
  for (int i = tid; i < kBins; i += kThreads) sample_hist[i] = 0;
  if (tid == 0) sm.s.threshold = kBins;
  __syncthreads();
  const int64_t span = 4 * static_cast<int64_t>(s.vec_end - s.vec_begin);
  const uint32_t bits = __float_as_uint(s.row[s.head + 4 * static_cast<int64_t>(s.vec_begin) + span * tid / kThreads]);
  if ((bits & 0x7FFF'FFFFu) <= 0x7F80'0000u) atomicAdd(&sample_hist[order_key(bits) >> (32 - kDigitBits)], 1u);
  __syncthreads();
  const int hi = kBins - 1 - 2 * tid, lo = hi - 1;
  const uint32_t n_hi = sample_hist[hi], n_lo = sample_hist[lo];
  uint32_t above = 0;
  BlockScan(sm.scan).ExclusiveSum(n_hi + n_lo, above);
  // Samples allowed at or above the threshold: (capacity / 2) x samples / slice scores.
  const int64_t allowed = int64_t{kBufferCapacity / 2} * kThreads / (span > 0 ? span : 1);
  if (above + n_hi + n_lo <= allowed) {
    atomicMin(&sm.s.threshold, static_cast<uint32_t>(lo));
  } else if (above + n_hi <= allowed) {
    atomicMin(&sm.s.threshold, static_cast<uint32_t>(hi));
  }
  __syncthreads();
}

// Finds the bin of the cluster-wide (or row-wide) histogram holding the `remaining`-th
// largest element in play: bins above it hold `above` < remaining elements, and above +
// bin_total >= remaining. Thread t brings the counts of bins hi = 2047 - 2t and lo = hi - 1
// summed over the blocks, so an exclusive scan in thread order counts the elements in
// higher bins. Writes sm.s.
template <class Sm>
__device__ void locate_bin(uint32_t n_hi, uint32_t n_lo, uint32_t remaining, Sm& sm) {
  const int hi = kBins - 1 - 2 * static_cast<int>(threadIdx.x), lo = hi - 1;
  uint32_t above = 0;
  BlockScan(sm.scan).ExclusiveSum(n_hi + n_lo, above);
  // Exactly one bin satisfies above < remaining <= above + count (empty bins never do).
  if (above < remaining && remaining <= above + n_hi) {
    sm.s.bin = static_cast<uint32_t>(hi);
    sm.s.above = above;
    sm.s.bin_total = n_hi;
  } else if (above + n_hi < remaining && remaining <= above + n_hi + n_lo) {
    sm.s.bin = static_cast<uint32_t>(lo);
    sm.s.above = above + n_hi;
    sm.s.bin_total = n_lo;
  }
  __syncthreads();
}

// locate_bin over the cluster's histograms, read over DSMEM.
template <int kCluster>
__device__ void find_bin(uint32_t* hist, uint32_t remaining, Smem& sm) {
  const int lo = kBins - 2 - 2 * static_cast<int>(threadIdx.x);
  uint32_t n_hi = 0, n_lo = 0;
#pragma unroll
  for (int r = 0; r < kCluster; ++r) {  // bins lo (even) and hi = lo + 1 in one 8-byte load
    const uint2 pair = *reinterpret_cast<const uint2*>(peer<kCluster>(hist, r) + lo);
    n_lo += pair.x;
    n_hi += pair.y;
  }
  locate_bin(n_hi, n_lo, remaining, sm);
}

// Steps 2-3 after the bin search: `remaining` and `final` for the chosen bin, this block's
// elements still in play (its own histogram's count of the bin), whether the next pass
// reads the buffer, and the plan narrowed to the bin (its next digit field unless final).
// False when no digit field is left (a bug, flagged in sm.s.overflow; field 4's bins hold
// one element each, so it cannot happen).
struct Progress {
  uint32_t remaining;  // still to select, across the row's blocks
  bool final;          // the next pass selects and ends
  uint32_t in_play;    // this block's elements in play for the next pass
  bool from_buffer;    // the next pass reads the buffer
  int level;           // the digit field the next pass histograms
};

template <class Sm>
__device__ bool narrow_plan(Plan<uint64_t>& plan, Progress& g, const uint32_t* hist, Sm& sm) {
  const uint32_t bin = sm.s.bin;
  g.remaining -= sm.s.above;
  g.final = sm.s.bin_total == g.remaining;  // all of bin `bin` is needed: take it and stop
  g.in_play = hist[bin];
  // The buffer holds every element still in play when it was filled without overflow
  // and, if speculatively, from a digit at or below the chosen bin; else the next pass
  // reads the row again and may fill the buffer afresh.
  const bool buffer_overflow = sm.s.buffer_overflow != 0;
  const bool buffered = plan.buffer && !buffer_overflow && plan.buffer_from <= bin;
  if (plan.buffer && !buffered) {
    __syncthreads();  // every thread has read the scalars above
    if (threadIdx.x == 0) {
      if (plan.buffer_from == 0) sm.s.overflow = 1u;  // in_play fitted: a bug
      sm.s.buffered_count = 0;
      sm.s.buffer_overflow = 0;
    }
  }
  g.from_buffer = g.from_buffer || buffered;
  plan.buffer_from = 0;
  const Field f = field(g.level);
  plan.mask_in = plan.mask_sel;
  plan.value_in = plan.value_sel;
  plan.mask_sel |= static_cast<uint64_t>((1u << f.width) - 1) << f.shift;
  plan.value_sel |= static_cast<uint64_t>(bin) << f.shift;
  if (g.final) return true;
  if (++g.level == kNumFields) {
    if (threadIdx.x == 0) sm.s.overflow = 1u;
    return false;
  }
  plan.digit_shift = field(g.level).shift;
  plan.digit_mask = (1u << field(g.level).width) - 1;
  return true;
}

// TopKOrder::kByIndex: this block's `selected` composites written as positions in
// ascending order to out[before ..], in two steps. mark_selection: the positions lie in the
// block's range [lo, hi); a bitmap of it (hi - lo bits, which the buffer holds:
// static_asserts at Smem and GridSmem) takes the buffer, free after the last pass, one bit
// set per selected position (at most kTopKMaxK: a larger count is an overflow the verdict
// reports, and nothing is written); returns the set bits of this thread's run of words.
// write_marked: an exclusive scan of those counts over the block gives each thread its
// first output slot. Only the second step needs `before`, so the grid path marks before
// the exchange that yields it.
// This thread's run of the bitmap's words [first, last): consecutive runs in thread order.
struct WordRun {
  int first, last;
};
__device__ __forceinline__ WordRun word_run(int lo, int hi) {
  const int words = (hi - lo + 31) / 32;
  const int words_each = (words + kThreads - 1) / kThreads;
  const int first = min(words, static_cast<int>(threadIdx.x) * words_each);
  return {first, min(words, first + words_each)};
}

template <class Sm>
__device__ uint32_t mark_selection(Sm& sm, int lo, int hi) {
  const int tid = static_cast<int>(threadIdx.x);
  uint32_t* bits = reinterpret_cast<uint32_t*>(sm.buffer);
  const int words = (hi - lo + 31) / 32;
  for (int w = tid; w < words; w += kThreads) bits[w] = 0;
  __syncthreads();
  const uint32_t selected = min(sm.s.selected_count, static_cast<uint32_t>(kTopKMaxK));
  for (uint32_t i = tid; i < selected; i += kThreads) {
    const int offset = static_cast<int>(kIndexMask - (sm.selected[i] & kIndexMask)) - lo;
    atomicOr(&bits[offset >> 5], 1u << (offset & 31));
  }
  __syncthreads();
  const WordRun run = word_run(lo, hi);
  uint32_t mine = 0;
  for (int w = run.first; w < run.last; ++w) mine += __popc(bits[w]);
  return mine;
}

template <class Sm>
__device__ void write_marked(Sm& sm, int lo, int hi, uint32_t mine, uint32_t before, int32_t* out) {
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(sm.buffer);
  const WordRun run = word_run(lo, hi);
  uint32_t slot = 0;
  BlockScan(sm.scan).ExclusiveSum(mine, slot);
  slot += before;
  for (int w = run.first; w < run.last; ++w) {
    for (uint32_t left = bits[w]; left != 0; left &= left - 1) {
      out[slot++] = lo + 32 * w + __ffs(static_cast<int>(left)) - 1;
    }
  }
}

// Block 0 of a row, by index: -1 in the slots after the row's `count` selected positions.
__device__ void fill_after(int32_t* out, uint32_t count, int k) {
  for (int i = static_cast<int>(count) + static_cast<int>(threadIdx.x); i < k; i += kThreads) out[i] = -1;
}

__device__ void fill_row(int32_t* out, int k, uint32_t from, const uint64_t* sorted) {
  for (int i = threadIdx.x; i < k; i += kThreads) {
    out[i] = static_cast<uint32_t>(i) < from ? static_cast<int32_t>(kIndexMask - (sorted[i] & kIndexMask)) : -1;
  }
}

// Block 0's last step: the `count` gathered composites (in the buffer) in descending order
// by a merge sort, kItems a thread (blocked: thread t holds ranks kItems t ..), written as
// indices, -1 past the count. The composites are distinct, so the sort has one result;
// 0, below every composite, fills the slots past the count and sorts last.
template <int kItems, class Sm>
__device__ void write_sorted(Sm& sm, uint32_t count, int k, int32_t* out) {
  using Sort = cub::BlockMergeSort<uint64_t, kThreads, kItems>;
  const int tid = static_cast<int>(threadIdx.x);
  uint64_t keys[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const uint32_t slot = static_cast<uint32_t>(kItems * tid + i);
    keys[i] = slot < count ? sm.buffer[slot] : 0;
  }
  typename Sort::TempStorage* temp;
  if constexpr (kItems == 1) {
    temp = &sm.sort_short;
  } else {
    temp = &sm.sort;
  }
  Sort(*temp).Sort(keys, [](uint64_t a, uint64_t b) { return a > b; }, static_cast<int>(count), uint64_t{0});
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int position = kItems * tid + i;
    if (position < k) {
      out[position] = static_cast<uint32_t>(position) < count ? static_cast<int32_t>(kIndexMask - (keys[i] & kIndexMask)) : -1;
    }
  }
}

// Step 0: row `row`'s valid length, or -1 when it lies outside [0, min(row_stride,
// kTopKMaxRowLength)]; then block 0 of the row has written its -1s and kBadLength. Every
// block of a row reads the same length, so all of them go on or all leave.
__device__ int checked_length(const TopKArgs& args, int row, int rank, int32_t* out, int32_t* status) {
  const int64_t n = args.valid_lengths != nullptr ? args.valid_lengths[row] : args.row_stride;
  if (n >= 0 && n <= kTopKMaxRowLength && n <= args.row_stride) return static_cast<int>(n);
  if (rank == 0) {
    fill_row(out, args.k, 0, nullptr);
    if (threadIdx.x == 0) status[row] = static_cast<int32_t>(TopKRowStatus::kBadLength);
  }
  return -1;
}

// Step 4's verdict, the same in every block of a row.
__device__ TopKRowStatus row_result(bool has_nan, bool overflow, uint32_t count, int k, int n) {
  if (has_nan) return TopKRowStatus::kNaN;
  if (overflow || count != static_cast<uint32_t>(min(k, n))) return TopKRowStatus::kInternal;
  return TopKRowStatus::kOk;
}

// Step 4's output, by one block of a row: -1 everywhere for a bad row (block 0); by index,
// this block's selection at `before` (and -1 after the row's `count`, block 0); by score,
// block 0's sort of the row's selection, gathered in its buffer.
template <class Sm>
__device__ void write_output(Sm& sm, TopKRowStatus result, bool by_index, int rank, const Slice& slice,
                             uint32_t before, uint32_t count, int k, int32_t* out) {
  if (result != TopKRowStatus::kOk) {
    if (rank == 0) fill_row(out, k, 0, nullptr);
  } else if (by_index) {
    const uint32_t mine = mark_selection(sm, slice.begin(), slice.end());
    write_marked(sm, slice.begin(), slice.end(), mine, before, out);
    if (rank == 0) fill_after(out, count, k);
  } else if (rank == 0) {
    __syncthreads();  // the gathered selection is in the buffer; the histograms are free
    if (k <= kThreads) {  // count <= K: every output slot has a thread
      write_sorted<1>(sm, count, k, out);
    } else {
      write_sorted<kSortItems>(sm, count, k, out);
    }
  }
}

// ---- The kernel: one cluster of kCluster blocks per row -----------------------------------
template <int kCluster>
__global__ void __launch_bounds__(kThreads, 1) topk_kernel(const TopKArgs args, int32_t* status) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_bytes);
  const int rank = block_rank<kCluster>();
  const int row = static_cast<int>(blockIdx.x / kCluster);
  const int tid = threadIdx.x;
  int32_t* out = args.indices + static_cast<int64_t>(row) * args.k;

  // 0. Length check. Every block of the cluster reads the same length and leaves together,
  //    before any block touches another's shared memory.
  const int n = checked_length(args, row, rank, out, status);
  if (n < 0) return;
  const Slice slice = make_slice(args.scores + static_cast<int64_t>(row) * args.row_stride, n, rank, kCluster);
  if (tid == 0) sm.s = Scalars{};

  // 1-3. Radix select. A row with at most k valid scores is one final pass that takes all.
  Progress g{static_cast<uint32_t>(min(args.k, n)), n <= args.k, slice.count, false, 0};
  Plan<uint64_t> plan{0, 0, 0, 0, field(0).shift, (1u << field(0).width) - 1, false, 0};
  bool has_nan = false;
  for (int pass = 0;; ++pass) {
    uint32_t* hist = sm.hist[pass & 1];
    if (!g.final) {
      for (int i = tid; i < kBins; i += kThreads) hist[i] = 0;
    }
    plan.buffer = !g.final && !g.from_buffer && g.in_play <= static_cast<uint32_t>(kBufferCapacity);
    if (pass == 0 && !g.final && !plan.buffer) {  // step 3: a slice larger than the buffer
      sample_threshold(slice, sm.hist[1], sm);
      plan.buffer_from = sm.s.threshold;
      plan.buffer = plan.buffer_from < static_cast<uint32_t>(kBins);
    }
    __syncthreads();
    if (g.from_buffer && g.final) {
      scan_buffer<true>(sm.s.buffered_count, plan, hist, sm);
    } else if (g.from_buffer) {
      scan_buffer<false>(sm.s.buffered_count, plan, hist, sm);
    } else if (g.final) {
      scan_row_plan<true, kCluster>(slice, plan, hist, sm);
    } else {
      scan_row_plan<false, kCluster>(slice, plan, hist, sm);
    }
    cluster_barrier<kCluster>();  // every block's histogram, selection and NaN flag are done
    if (pass == 0) {
      for (int r = 0; r < kCluster; ++r) has_nan |= *peer<kCluster>(&sm.s.has_nan, r) != 0;
      if (has_nan) break;
    }
    if (g.final) break;

    find_bin<kCluster>(hist, g.remaining, sm);
    if (!narrow_plan(plan, g, hist, sm)) break;
  }

  // 4. The cluster's selection count and self-checks, read by every block (one verdict).
  uint32_t count = 0, before = 0;
  bool overflow = false;
  if (!has_nan) {
    for (int r = 0; r < kCluster; ++r) {
      const Scalars* peer_s = peer<kCluster>(&sm.s, r);
      const uint32_t selected = peer_s->selected_count;
      overflow |= peer_s->overflow != 0 || selected > static_cast<uint32_t>(kTopKMaxK);
      if (r < rank) before += selected;
      count += selected;
    }
  }
  const TopKRowStatus result = row_result(has_nan, overflow, count, args.k, n);
  const bool by_index = args.order == TopKOrder::kByIndex;
  if (result == TopKRowStatus::kOk && !by_index && rank == 0) {  // block 0 gathers into its free buffer
    uint32_t gathered = 0;
    for (int r = 0; r < kCluster; ++r) {
      const uint32_t selected = peer<kCluster>(&sm.s, r)->selected_count;
      const uint64_t* peer_selected = peer<kCluster>(sm.selected, r);
      for (uint32_t i = tid; i < selected; i += kThreads) sm.buffer[gathered + i] = peer_selected[i];
      gathered += selected;
    }
  }
  cluster_barrier<kCluster>();  // peers stay resident until every block has read them
  write_output(sm, result, by_index, rank, slice, before, count, args.k, out);
  if (rank == 0 && tid == 0) status[row] = static_cast<int32_t>(result);
}

// ---- The grid path: G blocks a row in one cooperative grid ---------------------------------
// For few long rows: a cluster holds at most 8 blocks, and clusters of 4 or 8 blocks pack
// into the GPU's processing clusters with SMs left over, so a grid of a few rows leaves
// most of the GPU idle. Here block r of a row's G blocks (a power of two up to 128; the
// launch makes every block of the grid resident at once) owns slice r as in the cluster
// path, stages it in shared memory as order keys in pass 0 (the slice's only read of
// global memory), and runs the same passes, plans and selection as steps 1-4 with the
// slice in place of the row: a pass over the keys leaves in the buffer the elements in play
// for the next pass (and, when it compacted, those it selected), later passes read the
// buffer. Instead of DSMEM the row's blocks exchange through global memory: after a pass
// each block adds its non-zero histogram bins to the row's histogram of that pass (L2
// atomics), then a barrier of the row's blocks (an arrival counter, release/acquire), then
// every block reads the row's histogram with ld.global.cg (L2, never a stale L1 line); for
// G = 2 or 4 (topk_grid_kernel<G>) each block instead publishes its histogram as tagged
// words that the row's blocks poll ("The tagged exchange" below): no atomics, and one L2
// round trip where the barrier and the read take three. The same composites and selection
// as the cluster path, so the same bits.
constexpr int kGridSliceScores = 32768;  // a block's float4 vectors hold at most this many
constexpr int kGridMaxBlocksPerRow = 128;
static_assert(kBins % kGridMaxBlocksPerRow == 0, "a row's blocks zero its spare histogram in equal slices");
constexpr int kGridBufferCapacity = 4096;  // elements in play after a pass over the keys (else the keys)

// The tagged exchange (below) serves G <= kTaggedMaxBlocks; its launch counter:
constexpr int kTaggedMaxBlocks = 4;
struct alignas(16) TaggedEpoch {  // 16 bytes: one cp.async.cg
  uint32_t epoch;                 // 1 .. 2^29 - 1 (kEpochLimit - 1)
  uint32_t readers;               // blocks of the running launch that have read `epoch`
  uint32_t unused[2];
};

struct GridSmem {
  static constexpr uint32_t kBufferSlots = kGridBufferCapacity;
  // The slice's order keys (+ block 0's head, the last block's tail: < 4 each), and 4 more:
  // scan_keys reads whole 16-byte groups, the last up to 3 keys past the slice (zeroed).
  uint32_t keys[kGridSliceScores + 8 + 4];
  uint64_t buffer[kGridBufferCapacity];  // in play after a pass over the keys; then a by-index bitmap or block 0's
                                         // gathered selection
  uint64_t selected[kTopKMaxK];          // this block's selected composites, unordered
  union {
    uint32_t hist[kBins];  // this block's histogram of the current pass
    BlockSort::TempStorage sort;
    BlockSortShort::TempStorage sort_short;
  };
  Scalars s;
  uint32_t before, count;  // step 4: the selections of the lower ranks; the row's
  TaggedEpoch epoch;       // the tagged exchange's: this launch's epoch (fetch_epoch's copy)
  uint32_t peer_selected[kTaggedMaxBlocks];  // and step 4's selection counts of the row's blocks
  BlockScan::TempStorage scan;
};
static_assert(sizeof(GridSmem) <= 227 * 1024, "sm_90's dynamic shared memory limit per block");
static_assert(sizeof(GridSmem::buffer) * 8 >= kGridSliceScores + 8, "mark_selection: a bit for every position");
static_assert(kGridBufferCapacity >= kTopKMaxK, "block 0 gathers the row's selection in the buffer");

// Per row, in global memory, kept from launch to launch (topk.cu). A row has two
// GridRowZeroed sets and a word that names the one its next launch takes; that set is zero
// whenever no launch runs, so a launch needs no memset and no block has to count itself
// out. Both are zeroed when allocated. A launch's blocks of the row read the word before
// their first row barrier; after it (every block has read the word, and uses only its
// set) they zero the other set, a slice each, and block 0 points the word at it. The set
// a launch used is left as it is until the row's next launch zeroes it. A row whose
// length is refused (every block leaves before the barrier) touches neither. GridRow is
// written in the launch before it is read (block 0 zeroes the later passes' histograms
// before the first barrier; they are added to only after it).
struct alignas(16) GridRowZeroed {
  uint32_t hist0[kBins];  // pass 0's histogram of the row
  uint32_t arrivals;      // the row's barrier: arrivals so far
  uint32_t has_nan, overflow, gathered;
};
struct alignas(16) GridRow {
  uint32_t hist[kNumFields - 1][kBins];  // the histogram of pass p >= 1 in hist[p - 1]
  uint32_t selected_count[kGridMaxBlocksPerRow];
  uint64_t selected[kTopKMaxK];  // by score: the row's selection, gathered for block 0
};

// The record's counters with release/acquire order at gpu scope; the instructions name the
// global state space, so they take global addresses (cvta), not generic pointers.
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(__cvta_generic_to_global(p)) : "memory");
  return v;
}

__device__ __forceinline__ void add_release(uint32_t* p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" : : "l"(__cvta_generic_to_global(p)) : "memory");
}

// The row's blocks wait for one another: `arrivals` reaches `target` (blocks x barriers so
// far). Every write of the block before it is visible to every block of the row after it:
// the block barrier orders the threads' writes before thread 0's release increment, whose
// acquire load by a waiting thread 0 and that block's barrier order them before its
// threads' reads (a release/acquire pair at gpu scope; no sequentially consistent fence).
__device__ void row_barrier(uint32_t* arrivals, uint32_t target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    add_release(arrivals);
    while (load_acquire(arrivals) < target) {
    }
  }
  __syncthreads();
}

// Adds this block's histogram to the row's (the bins with a count only).
__device__ void publish_hist(const uint32_t* hist, uint32_t* row_hist) {
  for (int i = threadIdx.x; i < kBins; i += kThreads) {
    if (hist[i] != 0) atomicAdd(&row_hist[i], hist[i]);
  }
}

// locate_bin over the row's histogram (from L2).
__device__ void find_bin_row(const uint32_t* row_hist, uint32_t remaining, GridSmem& sm) {
  const int lo = kBins - 2 - 2 * static_cast<int>(threadIdx.x);
  const uint2 pair = __ldcg(reinterpret_cast<const uint2*>(row_hist + lo));
  locate_bin(pair.y, pair.x, remaining, sm);
}

// ---- The tagged exchange (grid path, G <= kTaggedMaxBlocks) --------------------------------
// For few blocks a row the row barrier and the row histogram's atomics are replaced by
// self-validating words: block b publishes pass p's histogram as 1,024 64-bit words, word j
// = tag << 32 | count(bin 2j + 1) << 16 | count(bin 2j), into its own slot, and each block
// polls the row's words of the bins it needs until their tags are this launch's for pass
// p. A word is one single-copy-atomic access, so a reader that sees the tag sees the counts
// stored with it: no fence, no barrier, no atomics, no zeroing; one L2 round trip once the
// data is there. A count fits 16 bits: a bin holds at most a slice's kGridSliceScores + 8.
// Step 4's count word goes out with a release store and is polled with acquire loads, so a
// by-score gather sees the selection its block wrote before it. A thread polls G words a
// pass, so the polls' L2 traffic grows with G: past 4 blocks a row the row barrier is the
// faster exchange (measured: docs/key-path-speed.md, top-K), hence kTaggedMaxBlocks.
//
// Tags are epoch << 3 | stage (32 bits), the epoch a launch counter on the device
// (TaggedEpoch, 1 .. 2^29 - 1, then 1 again) that every launch reads at its start. Every
// block reads the epoch, then counts itself in (`readers`, a release add: the read is
// ordered before it); the block that brings the count to gridDim.x knows every block has
// read it and advances the epoch and clears the count for the next launch, which the
// stream orders after this one (launches do not overlap: the records are shared, topk.cu).
// Why a word left by an earlier launch never matches: every launch clears word (epoch mod
// kTaggedWords) of every slot, each block its own before it publishes anything (at pass
// 0's end, or before it leaves with a refused length), block 0 those of the slots no block
// of the launch owns. Consecutive launches take consecutive epochs, so among any
// kTaggedWords consecutive launches (2 kTaggedWords across the wrap, where the residues
// jump) one clears a given word: the last write to a word before a launch is from at most
// 2 kTaggedWords launches back (a clear, tag 0, matching nothing, or a publication whose
// epoch is not this launch's), never from a whole cycle of 2^29 - 1 epochs back, the only
// distance at which an epoch repeats.
constexpr int kTaggedStages = kNumFields + 1;  // a histogram for each field's pass, then step 4's count
constexpr int kTaggedCountStage = kNumFields;
constexpr int kHistWords = kBins / 2;          // two bins a word
static_assert(kHistWords == kThreads, "a thread publishes one word of a histogram");
constexpr int kTaggedWords = kNumFields * kHistWords + kTaggedStages;
constexpr uint32_t kEpochLimit = 1u << 29;     // epochs 1 .. kEpochLimit - 1
static_assert(2 * kTaggedWords < kEpochLimit - 1, "every word is cleared within a cycle of epochs");
static_assert(kGridSliceScores + 8 < (1 << 16), "a bin's count fits 16 bits");
static_assert(kTopKMaxK < (1 << 15), "a block's selection count and its overflow bit fit 16 bits");

// One per resident block of the grid (blockIdx.x). words: pass p's histogram at
// [p kHistWords + j], stage s's flag word at [kNumFields kHistWords + s].
struct alignas(16) TaggedSlot {
  uint64_t words[kTaggedWords];
  uint64_t selected[kTopKMaxK];  // by score: this block's selection, written before its count word
};

__device__ __forceinline__ uint64_t* hist_word(TaggedSlot& slot, int pass, int j) {
  return &slot.words[pass * kHistWords + j];
}
__device__ __forceinline__ uint64_t* flag_word(TaggedSlot& slot, int stage) {
  return &slot.words[kNumFields * kHistWords + stage];
}
__device__ __forceinline__ uint32_t make_tag(uint32_t epoch, int stage) {
  return epoch << 3 | static_cast<uint32_t>(stage);
}

__device__ __forceinline__ uint64_t load_relaxed(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(__cvta_generic_to_global(p)) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t load_acquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(__cvta_generic_to_global(p)) : "memory");
  return v;
}
__device__ __forceinline__ void store_relaxed(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" : : "l"(__cvta_generic_to_global(p)), "l"(v) : "memory");
}
__device__ __forceinline__ void store_release(uint64_t* p, uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" : : "l"(__cvta_generic_to_global(p)), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t tagged(uint32_t tag, uint32_t payload) { return uint64_t{tag} << 32 | payload; }

// A flag word's payload once its tag is `tag` (kAcquire: later reads see what its writer
// wrote before its release).
template <bool kAcquire>
__device__ __forceinline__ uint32_t await_word(const uint64_t* p, uint32_t tag) {
  uint64_t v;
  do {
    v = kAcquire ? load_acquire(p) : load_relaxed(p);
  } while (static_cast<uint32_t>(v >> 32) != tag);
  return static_cast<uint32_t>(v);
}

// The epoch's steps, each by thread 0 unless said. fetch_epoch (at the start): an
// asynchronous copy of the epoch word into shared memory (.cg: from L2), so that no
// register waits on it through pass 0. count_in (before the block publishes anything, or
// before it leaves): the epoch from that copy, the block counted in, and the sweep's clear
// of word (epoch mod kTaggedWords) in the block's slot; returns `readers` before the add.
// advance_epoch: by the block that counted in last. clear_unowned (every thread of block 0,
// after count_in and a block barrier): the same word in the slots no block of the grid owns.
__device__ __forceinline__ void fetch_epoch(const TaggedEpoch* e, TaggedEpoch* copy) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n\tcp.async.commit_group;"
               : : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(copy))), "l"(__cvta_generic_to_global(e))
               : "memory");
}
__device__ uint32_t count_in(TaggedEpoch* e, TaggedEpoch* copy, TaggedSlot* slots) {
  asm volatile("cp.async.wait_all;" : : : "memory");
  const uint32_t epoch = copy->epoch;
  uint32_t before;
  asm volatile("atom.release.gpu.global.add.u32 %0, [%1], 1;"
               : "=r"(before) : "l"(__cvta_generic_to_global(&e->readers)) : "memory");
  store_relaxed(&slots[blockIdx.x].words[epoch % kTaggedWords], 0);
  return before;
}
__device__ void advance_epoch(TaggedEpoch* e, uint32_t epoch, uint32_t before) {
  if (before == gridDim.x - 1) {  // every block has read the epoch: the next launch takes the next one
    e->readers = 0;
    e->epoch = epoch + 1 == kEpochLimit ? 1u : epoch + 1;
  }
}
__device__ void clear_unowned(uint32_t epoch, TaggedSlot* slots, int slot_count) {
  const int b = static_cast<int>(gridDim.x + threadIdx.x);
  if (blockIdx.x == 0 && b < slot_count) store_relaxed(&slots[b].words[epoch % kTaggedWords], 0);
}

// Publishes this block's histogram of pass `pass` and (thread 0) its flag word.
__device__ void publish_tagged(const uint32_t* hist, uint32_t flag, TaggedSlot& mine, int pass, uint32_t tag) {
  const int j = threadIdx.x;
  store_relaxed(hist_word(mine, pass, j), tagged(tag, hist[2 * j + 1] << 16 | hist[2 * j]));
  if (threadIdx.x == 0) store_relaxed(flag_word(mine, pass), tagged(tag, flag));
}

// locate_bin over the row's kBlocks blocks' tagged histograms of pass `pass` (with
// `locate`); with `flags`, the OR of their flag words of the pass into sm.s.has_nan. Ends
// with a block barrier. A thread issues the loads of all its words at once and polls again
// only those whose tags were not yet this pass's.
template <int kBlocks, class Sm>
__device__ void find_bin_tagged(TaggedSlot* row_slots, int pass, uint32_t tag, uint32_t remaining, bool locate,
                                bool flags, Sm& sm) {
  const int j = kHistWords - 1 - static_cast<int>(threadIdx.x);  // bins lo = 2j and hi = 2j + 1 (locate_bin's)
  uint32_t n_hi = 0, n_lo = 0;
  uint32_t pending = locate ? (1u << kBlocks) - 1 : 0u;
  while (pending != 0) {
    uint64_t v[kBlocks];
#pragma unroll
    for (int r = 0; r < kBlocks; ++r) {
      if ((pending >> r & 1u) != 0) v[r] = load_relaxed(hist_word(row_slots[r], pass, j));
    }
#pragma unroll
    for (int r = 0; r < kBlocks; ++r) {
      if ((pending >> r & 1u) != 0 && static_cast<uint32_t>(v[r] >> 32) == tag) {
        n_lo += static_cast<uint32_t>(v[r]) & 0xFFFF;
        n_hi += static_cast<uint32_t>(v[r]) >> 16;
        pending &= ~(1u << r);
      }
    }
  }
  if (flags && static_cast<int>(threadIdx.x) < kBlocks &&
      await_word<false>(flag_word(row_slots[threadIdx.x], pass), tag) != 0) {
    sm.s.has_nan = 1u;
  }
  if (locate) {
    locate_bin(n_hi, n_lo, remaining, sm);  // ends with a block barrier
  } else {
    __syncthreads();
  }
}

// Pass 0: the slice's order keys into sm.keys (position lo + j at j) and its field-0
// histogram into sm.hist. Returns whether this thread saw a NaN.
__device__ bool stage_slice(const Slice& s, int lo, GridSmem& sm) {
  constexpr int kShift = field(0).shift - kIndexBits;  // field 0 of the order key
  bool nan = false;
  for_each_score<4, true>(s, [&](float score, int index) {
    const uint32_t bits = __float_as_uint(score);
    nan |= (bits & 0x7FFF'FFFFu) > 0x7F80'0000u;
    const uint32_t key = order_key(bits);
    sm.keys[index - lo] = key;
    atomicAdd(&sm.hist[key >> kShift], 1u);
  });
  return nan;
}

// A round of scan_keys: 16 keys a thread, four 16-byte groups; element b = 4u + e of this
// thread's round is key key_in_round(round, b). visit(b, key) for each of them below count;
// kPadded: for every key of a group that starts below count (the kernel zeroes the keys
// past the slice to the end of its last group, so the caller's visit must ignore zeros).
constexpr int kRoundGroups = 4;
constexpr int kRoundKeys = 4 * kRoundGroups * kThreads;

__device__ __forceinline__ int key_in_round(int round, int b) {
  return round + 4 * ((b / 4) * kThreads + static_cast<int>(threadIdx.x)) + b % 4;
}

// The composite of element b of this thread's round (position lo + its key's index).
__device__ __forceinline__ uint64_t round_composite(const GridSmem& sm, int lo, int round, int b) {
  const int j = key_in_round(round, b);
  return composite(sm.keys[j], lo + j);
}

template <bool kPadded, class Visit>
__device__ __forceinline__ void visit_round(const GridSmem& sm, int round, int count, Visit&& visit) {
  const auto* groups = reinterpret_cast<const uint4*>(sm.keys);
#pragma unroll
  for (int u = 0; u < kRoundGroups; ++u) {
    const int first = key_in_round(round, 4 * u);
    if (first >= count) continue;
    const uint4 g = groups[first / 4];
    const uint32_t keys[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (kPadded || first + e < count) visit(4 * u + e, keys[e]);
    }
  }
}

// A pass over the staged keys, on the order key alone when the plan allows it. The
// elements a pass selects or counts are those whose key lies in one range (the plan's
// masks are prefixes of the key: in play is value_in <= key <= value_in | ~mask_in, and of
// those (key & mask_sel) >= value_sel is key >= value_sel), a few in a hundred, and the
// kernel knows how many from the last histogram (`in_range`: its bins at or above the
// chosen one). When they fit the buffer, the pass compacts: a thread tests 16 keys a round
// (visit_round) with two instructions each and the round's hits go into the buffer with one
// warp_append; the classification (select, histogram) then runs over the buffer. The
// buffer so holds every element in play for the next pass, and the elements this pass
// selects, which the next pass's in-play test drops. Otherwise the pass classifies every
// key: 16 keys a thread a round, the selected and buffered ones appended with one
// warp_append each (an append per element would put a shared-memory atomic and a shuffle
// on each warp's serial path for every element that passes). Every thread runs the same
// rounds, so the warps are converged at each append.
template <bool kFinal>
__device__ void scan_keys(int lo, int count, const Plan<uint64_t>& p, uint32_t in_range, GridSmem& sm) {
  if (!needs_key_only(p, kFinal)) {
    for (int j = threadIdx.x; j < count; j += kThreads) {
      const uint64_t c = composite(sm.keys[j], lo + j);
      visit<kFinal>(c, c, p, sm.hist, sm);
    }
    return;
  }
  const Plan<uint32_t> q = on_key<kFinal>(p);
  if (in_range <= GridSmem::kBufferSlots) {  // the buffer is empty (the kernel resets it)
    // A zero key (the padding) is out of range when low > 0: 0 - low = 2^32 - low > span.
    // low is 0 only for the final pass of a row of at most k scores (bin 0 of field 0 holds
    // NaNs only, and a NaN row has no passes), which takes the checked rounds.
    const uint32_t low = q.value_sel, span = (q.value_in | ~q.mask_in) - q.value_sel;
    for (int round = 0; round < count; round += kRoundKeys) {
      uint32_t hits = 0;
      const auto test = [&](int b, uint32_t key) { hits |= static_cast<uint32_t>(key - low <= span) << b; };
      if (low != 0) {
        visit_round<true>(sm, round, count, test);
      } else {
        visit_round<false>(sm, round, count, test);
      }
      // in_range counts the hits; more than the buffer's slots would be a bug: flagged
      // (kInternal), never written, and the passes after it read at most the slots.
      warp_append<16>(
          sm.buffer, &sm.s.buffered_count, GridSmem::kBufferSlots, hits,
          [&](int b) { return round_composite(sm, lo, round, b); }, &sm.s.overflow);
    }
    __syncthreads();
    Plan<uint64_t> classify = p;
    classify.buffer = false;  // the buffer already holds what the next pass needs
    scan_buffer<kFinal>(min(sm.s.buffered_count, GridSmem::kBufferSlots), classify, sm.hist, sm);
    return;
  }
  for (int round = 0; round < count; round += kRoundKeys) {
    uint32_t selected = 0, buffered = 0;
    visit_round<false>(sm, round, count, [&](int b, uint32_t key) {
      if ((key & q.mask_in) != q.value_in) return;
      const uint32_t high = key & q.mask_sel;
      if (high > q.value_sel || (kFinal && high == q.value_sel)) {
        selected |= 1u << b;
      } else if (!kFinal && high == q.value_sel) {
        const uint32_t digit = (key >> q.digit_shift) & q.digit_mask;
        atomicAdd(&sm.hist[digit], 1u);
        if (q.buffer && digit >= q.buffer_from) buffered |= 1u << b;
      }
    });
    const auto comp = [&](int b) { return round_composite(sm, lo, round, b); };
    warp_append<16>(sm.selected, &sm.s.selected_count, kTopKMaxK, selected, comp, &sm.s.overflow);
    if constexpr (!kFinal) {
      warp_append<16>(sm.buffer, &sm.s.buffered_count, GridSmem::kBufferSlots, buffered, comp, &sm.s.buffer_overflow);
    }
  }
}

// The grid kernel's records, kept from launch to launch (topk.cu): the row barriers'
// (GridRowZeroed, GridRow) and the tagged exchange's (TaggedSlot, TaggedEpoch).
struct GridRecordsArgs {
  GridRowZeroed* zeroed;  // [rows][2]
  uint32_t* next_set;     // [rows]
  GridRow* rows;          // [rows]
  TaggedSlot* slots;      // [slot_count]: one a resident block
  int slot_count;
  TaggedEpoch* epoch;
};

// kTaggedBlocks: 0, the row barriers (any G); else the tagged exchange, for G = kTaggedBlocks
// (2 or 4) blocks a row.
template <int kTaggedBlocks>
__global__ void __launch_bounds__(kThreads, 1)
    topk_grid_kernel(const TopKArgs args, int blocks_per_row, GridRecordsArgs records, int32_t* status) {
  constexpr bool kTagged = kTaggedBlocks != 0;
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  GridSmem& sm = *reinterpret_cast<GridSmem*>(smem_bytes);
  const int rank = static_cast<int>(blockIdx.x) % blocks_per_row;
  const int row = static_cast<int>(blockIdx.x) / blocks_per_row;
  const int tid = threadIdx.x;
  int32_t* out = args.indices + static_cast<int64_t>(row) * args.k;
  // The row barriers' records (kTagged: unused).
  const uint32_t set = kTagged ? 0u : __ldcg(&records.next_set[row]) & 1u;  // zeroed[2 row + set] is zero
  GridRowZeroed& z = records.zeroed[kTagged ? 0 : 2 * row + set];
  GridRow& r = records.rows[kTagged ? 0 : row];
  uint32_t barriers = 0;
  const auto sync_row = [&] { row_barrier(&z.arrivals, ++barriers * static_cast<uint32_t>(blocks_per_row)); };
  // The tagged exchange's slots, this row's and this block's (formed where used from the
  // kernel's parameters, so that no register holds them through the passes).
  const auto row_slots = [&] { return records.slots + (blockIdx.x & ~static_cast<unsigned>(kTaggedBlocks - 1)); };
  const auto mine = [&]() -> TaggedSlot& { return records.slots[blockIdx.x]; };
  if constexpr (kTagged) {
    if (tid == 0) fetch_epoch(records.epoch, &sm.epoch);
  }

  // 0. Length check: every block of the row leaves before the first barrier (a tagged
  //    launch's block counted in first).
  const int n = checked_length(args, row, rank, out, status);
  if (n < 0) {
    if constexpr (kTagged) {
      if (tid == 0) {
        const uint32_t before = count_in(records.epoch, &sm.epoch, records.slots);
        advance_epoch(records.epoch, sm.epoch.epoch, before);
      }
      __syncthreads();
      clear_unowned(sm.epoch.epoch, records.slots, records.slot_count);
    }
    return;
  }
  const Slice slice = make_slice(args.scores + static_cast<int64_t>(row) * args.row_stride, n, rank, blocks_per_row);
  const int lo = slice.begin();
  const int count = static_cast<int>(slice.count);  // positions [lo, lo + count)
  if (tid == 0) sm.s = Scalars{};
  if (!kTagged && rank == 0) {
    for (int i = tid; i < (kNumFields - 1) * kBins; i += kThreads) (&r.hist[0][0])[i] = 0;
  }
  for (int i = tid; i < kBins; i += kThreads) sm.hist[i] = 0;
  if (tid == 0) sm.before = 0;
  __syncthreads();

  // Pass 0: stage the slice, histogram field 0. A slice past the keys' room would be the
  // launcher's bug: flagged (kInternal), never written.
  if (count <= kGridSliceScores + 8) {
    if (stage_slice(slice, lo, sm)) sm.s.has_nan = 1u;
    if (tid < 4) sm.keys[count + tid] = 0;  // to the end of the last 16-byte group (visit_round)
  } else if (tid == 0) {
    sm.s.overflow = 1u;
  }
  uint32_t readers_before = 0;
  if (kTagged && tid == 0) readers_before = count_in(records.epoch, &sm.epoch, records.slots);
  __syncthreads();
  Progress g{static_cast<uint32_t>(min(args.k, n)), n <= args.k, static_cast<uint32_t>(count), false, 0};
  Plan<uint64_t> plan{0, 0, 0, 0, field(0).shift, (1u << field(0).width) - 1, false, 0};
  bool has_nan = false, more = false;
  if constexpr (kTagged) {
    clear_unowned(sm.epoch.epoch, records.slots, records.slot_count);
    const uint32_t tag = make_tag(sm.epoch.epoch, 0);
    publish_tagged(sm.hist, sm.s.has_nan, mine(), 0, tag);
    // A row that is one final pass needs no bin (sm.s.bin stays 0: every bin in range); a
    // NaN row's search is harmless.
    find_bin_tagged<kTaggedBlocks>(row_slots(), 0, tag, g.remaining, !g.final, true, sm);
    if (tid == 0) advance_epoch(records.epoch, sm.epoch.epoch, readers_before);  // its add has long returned
    has_nan = sm.s.has_nan != 0;
    more = !has_nan;
    if (more && !g.final) more = narrow_plan(plan, g, sm.hist, sm);
  } else {
    publish_hist(sm.hist, z.hist0);
    if (tid == 0 && sm.s.has_nan != 0) atomicOr(&z.has_nan, 1u);
    sync_row();
    has_nan = __ldcg(&z.has_nan) != 0;
    {  // the row's next launch takes the other set: zeroed here, a slice a block
      GridRowZeroed& spare = records.zeroed[2 * row + (1u - set)];
      const int words = kBins / blocks_per_row;  // blocks_per_row is a power of two <= kBins
      for (int i = tid; i < words; i += kThreads) spare.hist0[rank * words + i] = 0;
      if (rank == 0 && tid == 0) {
        spare.arrivals = spare.has_nan = spare.overflow = spare.gathered = 0;
        records.next_set[row] = 1u - set;
      }
    }
    more = !has_nan;
    if (more && !g.final) {
      find_bin_row(z.hist0, g.remaining, sm);
      more = narrow_plan(plan, g, sm.hist, sm);
    }
  }

  // 1-3. The passes after pass 0 read the keys, or the buffer once pass 1 has filled it. A
  //    row with at most k valid scores is one final pass that takes all.
  for (int pass = 1; more; ++pass) {
    // A pass over the keys: how many it selects or counts (scan_keys), this block's bins of
    // the last histogram at or above the chosen one (all of them when the first pass is
    // final: bin 0).
    if (!g.from_buffer) {
      for (int i = tid; i < kBins; i += kThreads) {
        if (static_cast<uint32_t>(i) >= sm.s.bin && sm.hist[i] != 0) atomicAdd(&sm.s.in_range, sm.hist[i]);
      }
    }
    __syncthreads();  // every thread has read this block's histogram
    const uint32_t in_range = sm.s.in_range;
    if (!g.final) {
      for (int i = tid; i < kBins; i += kThreads) sm.hist[i] = 0;
    }
    plan.buffer = !g.final && !g.from_buffer && g.in_play <= static_cast<uint32_t>(kGridBufferCapacity);
    if (!g.from_buffer && tid == 0) sm.s.buffered_count = sm.s.buffer_overflow = 0;  // refilled by this pass
    __syncthreads();
    if (tid == 0) sm.s.in_range = 0;  // read by every thread before the barrier above
    if (g.from_buffer && g.final) {
      scan_buffer<true>(min(sm.s.buffered_count, GridSmem::kBufferSlots), plan, sm.hist, sm);
    } else if (g.from_buffer) {
      scan_buffer<false>(min(sm.s.buffered_count, GridSmem::kBufferSlots), plan, sm.hist, sm);
    } else if (g.final) {
      scan_keys<true>(lo, count, plan, in_range, sm);
    } else {
      scan_keys<false>(lo, count, plan, in_range, sm);
    }
    __syncthreads();
    if (g.final) break;
    if constexpr (kTagged) {
      const uint32_t tag = make_tag(sm.epoch.epoch, pass);
      publish_tagged(sm.hist, 0u, mine(), pass, tag);
      find_bin_tagged<kTaggedBlocks>(row_slots(), pass, tag, g.remaining, true, false, sm);
    } else {
      publish_hist(sm.hist, r.hist[pass - 1]);
      sync_row();
      find_bin_row(r.hist[pass - 1], g.remaining, sm);
    }
    more = narrow_plan(plan, g, sm.hist, sm);
  }

  // 4. Every block's count and flags through the row's record; by score, the selections
  //    gathered there for block 0. By index, the block marks its selection first.
  const bool by_index = args.order == TopKOrder::kByIndex;
  const uint32_t marked = by_index && !has_nan ? mark_selection(sm, lo, lo + count) : 0u;
  bool overflow = false;
  if constexpr (kTagged) {
    // The count word (release: by score, the selection written before it; a NaN row
    // publishes nothing, as its blocks all know the verdict).
    const uint32_t selected = sm.s.selected_count;
    const bool own_overflow = sm.s.overflow != 0 || selected > static_cast<uint32_t>(kTopKMaxK);
    if (!has_nan && !by_index && !own_overflow) {
      for (uint32_t i = tid; i < selected; i += kThreads) mine().selected[i] = sm.selected[i];
    }
    __syncthreads();
    const uint32_t tag = make_tag(sm.epoch.epoch, kTaggedCountStage);
    if (!has_nan && tid == 0) {
      store_release(flag_word(mine(), kTaggedCountStage),
                    tagged(tag, own_overflow ? 1u << 15 : min(selected, static_cast<uint32_t>(kTopKMaxK))));
    }
    uint32_t word = 0;
    if (!has_nan && tid < blocks_per_row) word = await_word<true>(flag_word(row_slots()[tid], kTaggedCountStage), tag);
    if (tid == 0) sm.s.overflow = 0;
    __syncthreads();
    if ((word >> 15) != 0) sm.s.overflow = 1u;
    const uint32_t peer_count = word & 0x7FFF;
    if (tid < blocks_per_row) sm.peer_selected[tid] = peer_count;
    uint32_t below = 0, total = 0;
    BlockScan(sm.scan).ExclusiveSum(peer_count, below, total);
    if (tid == rank) sm.before = below;
    if (tid == 0) sm.count = total;
    __syncthreads();
    overflow = sm.s.overflow != 0;
  } else {
    if (!has_nan && tid == 0) {
      const uint32_t selected = sm.s.selected_count;
      r.selected_count[rank] = selected;
      bool own_overflow = sm.s.overflow != 0 || selected > static_cast<uint32_t>(kTopKMaxK);
      if (!own_overflow && !by_index) {
        sm.before = atomicAdd(&z.gathered, selected);  // this block's slots in r.selected
        own_overflow = sm.before + selected > static_cast<uint32_t>(kTopKMaxK);
      }
      if (own_overflow) atomicOr(&z.overflow, 1u);
    }
    __syncthreads();
    if (!has_nan && !by_index && sm.before + sm.s.selected_count <= static_cast<uint32_t>(kTopKMaxK)) {
      for (uint32_t i = tid; i < sm.s.selected_count; i += kThreads) r.selected[sm.before + i] = sm.selected[i];
    }
    sync_row();
    overflow = __ldcg(&z.overflow) != 0;
    const uint32_t peer_count = !has_nan && tid < blocks_per_row ? __ldcg(&r.selected_count[tid]) : 0u;
    uint32_t below = 0, total = 0;
    BlockScan(sm.scan).ExclusiveSum(peer_count, below, total);
    if (tid == rank) sm.before = below;
    if (tid == 0) sm.count = total;
    __syncthreads();
  }
  const uint32_t before = sm.before, row_count = sm.count;
  const TopKRowStatus result = row_result(has_nan, overflow, row_count, args.k, n);
  if (result == TopKRowStatus::kOk && !by_index && rank == 0) {
    if constexpr (kTagged) {
      // The row's selections, rank by rank, from the blocks' slots (their count words
      // acquired above); the loads of all ranks in flight at once.
      uint32_t at = 0;
#pragma unroll
      for (int b = 0; b < kTaggedBlocks; ++b) {
        const uint32_t c = sm.peer_selected[b];
        for (uint32_t i = tid; i < c; i += kThreads) sm.buffer[at + i] = __ldcg(&row_slots()[b].selected[i]);
        at += c;
      }
    } else {
      for (uint32_t i = tid; i < row_count; i += kThreads) sm.buffer[i] = __ldcg(&r.selected[i]);
    }
  }
  if (result == TopKRowStatus::kOk && by_index) {
    write_marked(sm, lo, lo + count, marked, before, out);
    if (rank == 0) fill_after(out, row_count, args.k);
  } else {
    write_output(sm, result, by_index, rank, slice, before, row_count, args.k, out);
  }
  if (rank == 0 && tid == 0) status[row] = static_cast<int32_t>(result);
}

}  // namespace dsaf::dev::topk_select
