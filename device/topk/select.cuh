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
// Algorithm: one thread-block cluster of kCluster blocks (1, 2, 4 or 8) per row; block r of
// the cluster owns the r-th contiguous slice of the row. Every pass reads the elements
// still "in play" and each block keeps its own histogram in shared memory; the blocks read
// one another's histograms through distributed shared memory (DSMEM), so every block picks
// the same digit. Radix select, most significant digit first, over the five digit fields
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
//    (write_by_index: a bitmap, no sort). Block 0 writes -1 after the valid count.
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

template <bool kFinal, class T>
__device__ __forceinline__ void visit(T x, uint64_t c, const Plan<T>& p, uint32_t* hist, Smem& sm) {
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
        append(sm.buffer, &sm.s.buffered_count, kBufferCapacity, c, &sm.s.buffer_overflow);
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
  uint32_t count;            // scores this block reads
};

template <int kCluster>
__device__ Slice make_slice(const float* row, int n, int rank) {
  Slice s;
  s.row = row;
  const auto address = reinterpret_cast<uintptr_t>(row);  // float-aligned
  s.head = min(n, static_cast<int>(((16 - (address & 15)) & 15) / sizeof(float)));
  const int vectors = (n - s.head) / 4;
  s.vec_begin = static_cast<int>(static_cast<int64_t>(vectors) * rank / kCluster);
  s.vec_end = static_cast<int>(static_cast<int64_t>(vectors) * (rank + 1) / kCluster);
  s.tail_begin = s.head + 4 * vectors;
  s.tail_end = n;
  s.has_head = rank == 0;
  s.has_tail = rank == kCluster - 1;
  s.count = 4u * (s.vec_end - s.vec_begin) + (s.has_head ? s.head : 0) + (s.has_tail ? n - s.tail_begin : 0);
  return s;
}

template <bool kFinal, int kUnroll, class T>
__device__ void scan_row(const Slice& s, const Plan<T>& p, uint32_t* hist, Smem& sm) {
  const int tid = threadIdx.x;
  bool nan = false;
  if (s.has_head && tid < s.head) nan |= visit_score<kFinal>(s.row[tid], tid, p, hist, sm);
  if (s.has_tail && s.tail_begin + tid < s.tail_end) {
    nan |= visit_score<kFinal>(s.row[s.tail_begin + tid], s.tail_begin + tid, p, hist, sm);
  }
  const float4* vectors = reinterpret_cast<const float4*>(s.row + s.head);
  for (int v0 = s.vec_begin + tid; v0 < s.vec_end; v0 += kThreads * kUnroll) {
    // Loads first, so kUnroll of them are in flight.
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (v0 + u * kThreads < s.vec_end) x[u] = __ldg(vectors + v0 + u * kThreads);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * kThreads;
      if (v < s.vec_end) {
        const int i = s.head + 4 * v;
        nan |= visit_score<kFinal>(x[u].x, i, p, hist, sm);
        nan |= visit_score<kFinal>(x[u].y, i + 1, p, hist, sm);
        nan |= visit_score<kFinal>(x[u].z, i + 2, p, hist, sm);
        nan |= visit_score<kFinal>(x[u].w, i + 3, p, hist, sm);
      }
    }
  }
  if (nan) sm.s.has_nan = 1u;
}

template <bool kFinal>
__device__ void scan_buffer(uint32_t count, const Plan<uint64_t>& p, uint32_t* hist, Smem& sm) {
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

// The pass over the row, on the order key alone when the plan allows it.
template <bool kFinal, int kCluster>
__device__ void scan_row_plan(const Slice& s, const Plan<uint64_t>& p, uint32_t* hist, Smem& sm) {
  const bool key_only = (p.mask_sel & kIndexMask) == 0 && (kFinal || p.digit_shift >= kIndexBits);
  if (key_only) {
    const Plan<uint32_t> narrow{static_cast<uint32_t>(p.mask_in >> kIndexBits),
                                static_cast<uint32_t>(p.value_in >> kIndexBits),
                                static_cast<uint32_t>(p.mask_sel >> kIndexBits),
                                static_cast<uint32_t>(p.value_sel >> kIndexBits),
                                kFinal ? 0 : p.digit_shift - kIndexBits,
                                p.digit_mask,
                                p.buffer,
                                p.buffer_from};
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

// Finds the bin of the cluster-wide histogram holding the `remaining`-th largest element
// in play: bins above it hold `above` < remaining elements, and above + bin_total >=
// remaining. Thread t sums bins 2047 - 2t and 2046 - 2t over the cluster's blocks, so an
// exclusive scan in thread order counts the elements in higher bins. Writes sm.s.
template <int kCluster>
__device__ void find_bin(uint32_t* hist, uint32_t remaining, Smem& sm) {
  const int hi = kBins - 1 - 2 * static_cast<int>(threadIdx.x), lo = hi - 1;
  uint32_t n_hi = 0, n_lo = 0;
#pragma unroll
  for (int r = 0; r < kCluster; ++r) {  // bins lo (even) and hi = lo + 1 in one 8-byte load
    const uint2 pair = *reinterpret_cast<const uint2*>(peer<kCluster>(hist, r) + lo);
    n_lo += pair.x;
    n_hi += pair.y;
  }
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

// TopKOrder::kByIndex: this block's `selected` composites written as positions in
// ascending order to out[before ..]. The positions lie in the block's range [lo, hi); a
// bitmap of it (hi - lo <= kTopKMaxRowLength bits) takes the buffer, free after the last
// pass, one bit set per selected position. Thread t counts the bits of its run of words and
// an exclusive scan over the block gives its first output slot.
__device__ void write_by_index(Smem& sm, int lo, int hi, uint32_t before, int32_t* out) {
  static_assert(sizeof(Smem::buffer) * 8 >= kTopKMaxRowLength, "a bit for every position of a row");
  const int tid = static_cast<int>(threadIdx.x);
  uint32_t* bits = reinterpret_cast<uint32_t*>(sm.buffer);
  const int words = (hi - lo + 31) / 32;
  for (int w = tid; w < words; w += kThreads) bits[w] = 0;
  __syncthreads();
  for (uint32_t i = tid; i < sm.s.selected_count; i += kThreads) {
    const int offset = static_cast<int>(kIndexMask - (sm.selected[i] & kIndexMask)) - lo;
    atomicOr(&bits[offset >> 5], 1u << (offset & 31));
  }
  __syncthreads();
  const int run = (words + kThreads - 1) / kThreads;
  const int first = min(words, tid * run), last = min(words, first + run);
  uint32_t mine = 0;
  for (int w = first; w < last; ++w) mine += __popc(bits[w]);
  uint32_t slot = 0;
  BlockScan(sm.scan).ExclusiveSum(mine, slot);
  slot += before;
  for (int w = first; w < last; ++w) {
    for (uint32_t left = bits[w]; left != 0; left &= left - 1) {
      out[slot++] = lo + 32 * w + __ffs(static_cast<int>(left)) - 1;
    }
  }
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
template <int kItems>
__device__ void write_sorted(Smem& sm, uint32_t count, int k, int32_t* out) {
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
  const int64_t n64 = args.valid_lengths != nullptr ? args.valid_lengths[row] : args.row_stride;
  if (n64 < 0 || n64 > kTopKMaxRowLength || n64 > args.row_stride) {
    if (rank == 0) {
      fill_row(out, args.k, 0, nullptr);
      if (tid == 0) status[row] = static_cast<int32_t>(TopKRowStatus::kBadLength);
    }
    return;
  }
  const int n = static_cast<int>(n64);
  const Slice slice = make_slice<kCluster>(args.scores + static_cast<int64_t>(row) * args.row_stride, n, rank);
  if (tid == 0) sm.s = Scalars{};

  // 1-3. Radix select. A row with at most k valid scores is one final pass that takes all.
  uint32_t remaining = static_cast<uint32_t>(min(args.k, n));  // still to select, cluster-wide
  bool final = n <= args.k;
  bool from_buffer = false;
  uint32_t in_play = slice.count;  // this block's elements in play for the coming pass
  int level = 0;
  Plan<uint64_t> plan{0, 0, 0, 0, field(0).shift, (1u << field(0).width) - 1, false, 0};
  bool has_nan = false;
  for (int pass = 0;; ++pass) {
    uint32_t* hist = sm.hist[pass & 1];
    if (!final) {
      for (int i = tid; i < kBins; i += kThreads) hist[i] = 0;
    }
    plan.buffer = !final && !from_buffer && in_play <= static_cast<uint32_t>(kBufferCapacity);
    if (pass == 0 && !final && !plan.buffer) {  // step 3: a slice larger than the buffer
      sample_threshold(slice, sm.hist[1], sm);
      plan.buffer_from = sm.s.threshold;
      plan.buffer = plan.buffer_from < static_cast<uint32_t>(kBins);
    }
    __syncthreads();
    if (from_buffer && final) {
      scan_buffer<true>(sm.s.buffered_count, plan, hist, sm);
    } else if (from_buffer) {
      scan_buffer<false>(sm.s.buffered_count, plan, hist, sm);
    } else if (final) {
      scan_row_plan<true, kCluster>(slice, plan, hist, sm);
    } else {
      scan_row_plan<false, kCluster>(slice, plan, hist, sm);
    }
    cluster_barrier<kCluster>();  // every block's histogram, selection and NaN flag are done
    if (pass == 0) {
      for (int r = 0; r < kCluster; ++r) has_nan |= *peer<kCluster>(&sm.s.has_nan, r) != 0;
      if (has_nan) break;
    }
    if (final) break;

    find_bin<kCluster>(hist, remaining, sm);
    const uint32_t bin = sm.s.bin;
    remaining -= sm.s.above;
    final = sm.s.bin_total == remaining;  // all of bin `bin` is needed: take it and stop
    in_play = hist[bin];
    // The buffer holds every element still in play when it was filled without overflow
    // and, if speculatively, from a digit at or below the chosen bin; else the next pass
    // reads the row again and may fill the buffer afresh.
    const bool buffer_overflow = sm.s.buffer_overflow != 0;
    const bool buffered = plan.buffer && !buffer_overflow && plan.buffer_from <= bin;
    if (plan.buffer && !buffered) {
      __syncthreads();  // every thread has read the scalars above
      if (tid == 0) {
        if (plan.buffer_from == 0) sm.s.overflow = 1u;  // in_play fitted: a bug
        sm.s.buffered_count = 0;
        sm.s.buffer_overflow = 0;
      }
    }
    from_buffer = from_buffer || buffered;
    plan.buffer_from = 0;
    const Field f = field(level);
    plan.mask_in = plan.mask_sel;
    plan.value_in = plan.value_sel;
    plan.mask_sel |= static_cast<uint64_t>((1u << f.width) - 1) << f.shift;
    plan.value_sel |= static_cast<uint64_t>(bin) << f.shift;
    if (!final) {
      // Field 4 cannot get here (its bins hold one element each); kept as a guard.
      if (++level == kNumFields) {
        if (tid == 0) sm.s.overflow = 1u;
        break;
      }
      plan.digit_shift = field(level).shift;
      plan.digit_mask = (1u << field(level).width) - 1;
    }
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
  TopKRowStatus result = TopKRowStatus::kOk;
  if (has_nan) {
    result = TopKRowStatus::kNaN;
  } else if (overflow || count != static_cast<uint32_t>(min(args.k, n))) {
    result = TopKRowStatus::kInternal;
  }
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

  if (result != TopKRowStatus::kOk) {
    if (rank == 0) fill_row(out, args.k, 0, nullptr);
  } else if (by_index) {
    const int lo = rank == 0 ? 0 : slice.head + 4 * slice.vec_begin;
    const int hi = slice.has_tail ? n : slice.head + 4 * slice.vec_end;
    write_by_index(sm, lo, hi, before, out);
    if (rank == 0) {
      for (int i = static_cast<int>(count) + tid; i < args.k; i += kThreads) out[i] = -1;
    }
  } else if (rank == 0) {
    __syncthreads();  // the gathered selection is in the buffer; the histograms are free
    if (args.k <= kThreads) {  // count <= K: every output slot has a thread
      write_sorted<1>(sm, count, args.k, out);
    } else {
      write_sorted<kSortItems>(sm, count, args.k, out);
    }
  }
  if (rank == 0 && tid == 0) status[row] = static_cast<int32_t>(result);
}

}  // namespace dsaf::dev::topk_select
