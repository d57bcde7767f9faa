// File: paged_logits_mma.cu — the fast paged decode logits kernel (api.h
// launch_paged_logits_fast) on Hopper's warpgroup tensor-core instruction (wgmma, sm_90a)
// with fp32 accumulators. One kernel template, two key formats:
//   kFp8E4m3fn cache (132 B/token): e4m3 keys x e4m3 queries (wgmma m64n64k32 .e4m3), the
//     key scale after the head sum. This is the instruction DeepGEMM's fp8 paged MQA logits
//     kernel runs, so the fast kernel has the accumulator a serving stack has.
//   kBf16 cache (256 B/token; also kFp4SimulatedBf16, stored the same way): bf16 keys;
//     queries as stored when bf16, widened exactly when e4m3 (every e4m3 value is a bf16
//     value); wgmma m64n64k16 .bf16. The launcher refuses queries bf16 cannot hold exactly.
// Same semantics, mask and output layout as the exact-order kernel (paged_logits.cu):
//   logits[r][s] = k_scale[s] * sum_h ReLU(q[r][h] . k[s]) * w[r][h]  for s < row_valid[r],
//   -inf for row_valid[r] <= s < max_context.
// The contract is BOUNDED, not byte-exact (Numerics below); tests/device/
// paged_logits_gpu_test.cu checks the bound on every score of every preset the kernel takes.
//
// Launch shape: one wave of blocks (blocks_for); a row group is kRowsPerBlock consecutive
// rows (1, or 4 when PagedLogitsArgs::shared_row_run says rows come in runs of one
// sequence, or, with the hint unknown, when route_rows finds they do); a block is one
// warpgroup (4 warps, 128 threads), or, bf16 four rows a block on the TMA path, two
// warpgroups that share the group's query tile and take its steps in turn, one block an
// SM (score_segment_turns). A group's work is a pass per sequence among its rows
// (one pass when they share it), a pass's steps of 64 keys up to its rows' longest valid
// length; the passes' steps of all groups, laid end to end, are cut into equal contiguous
// shares, one a block, and so are the steps past them that only get -inf (the work
// partition, kernel part 0), so rows of unequal valid lengths (a prefill chunk's causal
// rows, a study's queries spread over [N/2, N), a decode batch's contexts) keep every
// block equally busy. A block walks its keys in steps of 64 (wgmma's M): step i lives in
// ring slot i % kStages (a warpgroup's own slots when several take turns), kStages - 1
// steps are in flight (cp.async, every thread copying its share; or, four rows a block,
// one TMA box a 128-byte column block and, fp8, one bulk copy of the scales a step from
// one thread, and an fp8 group's e4m3 query tile one TMA box: WgmmaTraits::kTma) while the
// tensor core works on one. Per step and warp the loop issues a handful of copies, one
// barrier, 4 (fp8) or 8 (bf16) wgmma and the epilogue; bf16 four rows a block split the step into
// two halves of two rows, each half's epilogue under the other's wgmma, where they run as
// one warpgroup a block (WgmmaTraits::kSplitStep; 2 x 8 wgmma at N = 128). Decode is
// memory-bound and runs near the copy bandwidth (docs/key-path-speed.md); wgmma reads the
// query's operand from shared memory itself, where an mma.sync kernel was held back by
// the tensor pipe and the shared-memory reloads of the query's fragments. Rows of one
// sequence (64 queries x 128K keys) are arithmetic-bound: 2 x 64 heads x 128 flops per
// row and key against 132 bytes a key read once; one row a block reads the cache once a
// row.
//
// Shared-memory operands (PTX ISA, "Shared Memory Matrix Layout", 128-byte swizzling,
// K-major, which e4m3 wgmma requires for both operands): row r of a 64-row tile (a key of
// the step, or a query head) has its 16-byte chunk c (dims 16c.. of fp8, 8c.. of bf16) at
//   tile + (c / 8) x 8 KB + r x 128 + ((c mod 8) xor (r mod 8)) x 16,
// in 1024-byte-aligned atoms of 8 rows x 128 bytes. A row's 8 chunks are then a permutation
// of the 8 bank quads of its 128 bytes, so a warp's copy of 4 whole rows takes the minimum
// 4 shared-memory wavefronts. A matrix descriptor (sw128_descriptor) names the tile by its
// start address, the 1024-byte distance between 8-row groups and the swizzle mode; the
// hardware applies the xor to the final address bits (4-6 with 7-9), so the k slice s of
// 32 bytes (k32 e4m3 | k16 bf16) starts at tile + (s / 4) x 8 KB + (s mod 4) x 32.
// The query tile is the B operand of 64 x kRowsPerBlock rows (wgmma's N: 64 or 256), query
// row rr's head h at row 64 rr + h, its 128-byte column blocks 64 x kRowsPerBlock x 128
// bytes apart (the same layout with more rows); for 16 or 32 heads the rest of a row's 64
// are zero and the epilogue reads only the real heads' columns.
//
// Accumulator fragment (PTX ISA, "Register fragment for matrix D", m64nNk*): warp w, lane
// (g = lane / 4, t = lane % 4): d[4n + c] = (key 16w + g, column 8n + 2t + c),
// d[4n + 2 + c] = (key 16w + g + 8, the same column), c in {0, 1}; column 64 rr + h is
// query row rr's head h, so row rr's accumulators are d[32 rr .. 32 rr + 31], laid out as
// a one-row block's. Each column's dot product is the same instruction's at N = 64 or 256.
//
// Numerics. Every product is exact in fp32 (e4m3 x e4m3: 4-bit significands; bf16 x bf16:
// 8-bit), so the error comes from how the tensor core adds products, and from the fp32
// epilogue. With M_h = sum_d |q_hd k_d| (every addend and partial sum is at most M_h):
//  (a) fp8 cache: Hopper's e4m3 accumulation keeps about 14 significant bits (DeepSeek-V3
//      report §3.3.2, measured on H800). Model: one k32 instruction aligns its 32 products
//      and the running sum to the largest of them, keeps at least 13 significant bits by
//      truncation, and normalises once: 34 errors, each < 2^-12 M_h; 4 instructions over
//      the 128 dims: |dot_h - exact_h| <= 136 x 2^-12 M_h. The model is an assumption about
//      undocumented hardware, and the test is what holds it to account: it checks this
//      bound on every score of every case (and reports the largest fraction of it used).
//  (b) bf16 cache: the block-FMA model of Fasi, Higham, Mikaitis and Pranesh ("Numerical
//      behavior of NVIDIA tensor cores", PeerJ CS 2021): products are added to the fp32
//      accumulator in blocks of G >= 4, aligned to the block's largest addend with
//      truncation past 24 significant bits, then normalised by truncation. A block adds
//      G + 1 aligned addends and one normalisation, each wrong by < 2^-23 M_h, so over
//      128 dims: 128 / G x (G + 2) <= 192 errors: |dot_h - exact_h| <= 192 x 2^-23 M_h.
//  (c) epilogue, both: relu, then __fmaf_rn(relu, w_h, sum) over the lane's H / 4 heads (one
//      rounding per head), the sum of the quad's 4 partial sums (3 additions), and for fp8
//      x k_scale: H + 4 roundings, each of a value bounded by W = sum_h |w_h| M_h (to first
//      order). ReLU is 1-Lipschitz, so
//        |fast - exact| <= k_scale x ( sum_h |w_h| E_h + (H + 4) x 2^-24 x W ),
//      E_h from (a) or (b), k_scale = 1 for bf16. The test takes 4 x 34 x 2^-12 (fp8) and
//      200 x 2^-23 (bf16; 8 for second-order terms). Not covered: underflow (values below
//      2^-126; a tensor core may flush bf16 subnormal inputs and fp32 subnormal sums).
// Deterministic: fixed orders everywhere, no atomics; each key's quad sum is formed in one
// fixed order (see the epilogue).
#include <cuda.h>  // CUtensorMap (the driver's encoder is looked up at run time: no -lcuda)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "device/api.h"
#include "device/launch.h"
#include "device/primitives/async_copy.cuh"
#include "device/primitives/mbarrier.cuh"
#include "device/primitives/paging.cuh"
#include "device/primitives/warp.cuh"

namespace dsaf::dev {
namespace {

using ref::StorageFormat;

// Keys a step: wgmma's M (WgmmaTraits::kKeysPerStep); the work partition counts in steps.
constexpr int kStepKeys = 64;

// Every size of the kernel, derived from the key format, the head count and the copy piece:
// 16 bytes when every key row is 16-byte aligned (a 16-byte aligned cache; fp8 pages of at
// least 4 tokens), else 4 (fp8 pages of 1 or 2 tokens: 132 B/token rows are 4-byte aligned).
//
// kRowsPerBlock query rows share a block (1, or 4 for rows of one sequence: a prefill
// chunk, a study's queries): the block copies each key tile once and multiplies it by the
// four rows' stacked query tiles in one m64n256 instruction, so a sequence's keys cross L2
// once per four rows instead of once per row, and the tensor core runs its widest N.
template <StorageFormat kKeyFormat, int kHeadCount, int kPiece, int kRowsPerBlock, int kWarpgroupCount = 1>
struct WgmmaTraits {
  static constexpr bool kFp8 = kKeyFormat == StorageFormat::kFp8E4m3fn;
  static constexpr int kHeads = kHeadCount;
  static constexpr int kRows = kRowsPerBlock;
  static constexpr int kPieceBytes = kPiece;
  static constexpr int kHeadTiles = kHeads / 8;        // 8-head column groups the epilogue reads
  static constexpr int kRowBytes = kFp8 ? 128 : 256;   // key values per token
  static constexpr int kScaleBytes = kFp8 ? 4 : 0;     // the fp8 key's fp32 scale
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kKeysPerStep = kStepKeys;       // wgmma M
  static constexpr int kQueryRows = 64 * kRows;        // wgmma N: 64 head rows a query row
  static constexpr int kAccumulators = kQueryRows / 2;  // 64 keys x N over 128 threads
  // Warpgroups a block (kWarpgroupCount): 1, or 2 for bf16 four rows on the TMA path, which
  // share the group's query tile and take the segment's steps in turn (score_segment_turns),
  // one block an SM: 2 x 128 threads at up to 255 registers (the weights in registers, as at
  // two one-warpgroup blocks), and one 64 KB query tile an SM instead of two, which leaves
  // room for a TMA ring. (fp8 four rows stay three one-warpgroup blocks an SM: as three
  // warpgroups in turn in one block they were 12-14% slower, docs/key-path-speed.md.)
  static constexpr int kWarpgroups = kWarpgroupCount;
  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kThreads = kWarpgroupThreads * kWarpgroups;
  static constexpr int kTileBytes = 64 * kRowBytes;    // a step of keys
  static constexpr int kQueryTileBytes = kQueryRows * kRowBytes;
  static constexpr int kSlices = kRowBytes / 32;       // wgmma per step: k32 e4m3 | k16 bf16
  // Ring slots and blocks per SM: fp8 4 x 8 KB and 5 blocks (3 steps = 25 KB in flight per
  // block), bf16 3 x 16 KB and 3 blocks (32 KB per block); Little's law asks for ~30 KB per
  // SM (~4 TB/s / 132 SMs x ~1 us). Four rows a block: 128 accumulators a thread. fp8 keeps
  // the head weights in shared memory (kWeightsInSmem), which leaves registers for three
  // blocks an SM (65,536 / (3 x 128) = 170 a thread); bf16 keeps them in registers (64 a
  // thread), two blocks an SM, as its two blocks' tiles (2 x 100 KB) fill the shared memory.
  static constexpr int kStages = kFp8 ? 4 : 3;
  static constexpr int kBlocksPerSm = kWarpgroups > 1 ? 1 : kRows > 1 ? (kFp8 ? 3 : 2) : kFp8 ? 5 : 3;
  static constexpr int kMinStepsPerBlock = 4 * kWarpgroups;  // blocks_for
  // Ring slots: kStages a warpgroup (warpgroup w's local slot s is slot w x kStages + s).
  static constexpr int kSlots = kWarpgroups * kStages;
  // Dynamic shared memory: 1 KB of slack to align the tiles to 1024 bytes (swizzle atoms),
  // the query tile, the ring, the ring's key scales, the head weights, 64 a row (fp8, four
  // rows a block).
  static constexpr int kScaleRingBytes = kSlots * kKeysPerStep * kScaleBytes;
  static constexpr bool kWeightsInSmem = kFp8 && kRows > 1;
  static constexpr int kWeightBytes = kWeightsInSmem ? kRows * 64 * 4 : 0;
  // Four rows a block, pages of at least a step (the launcher decides per launch), fp8, or
  // bf16 as warpgroups in turn: the tensor memory accelerator copies each step's key tile
  // (a 64 x 128-byte box a column block, swizzled as the wgmma layout above) and, fp8, a
  // bulk copy its 256 bytes of scales, issued by one thread and awaited on the slot's
  // mbarrier; no thread computes a copy address. Else every thread's cp.async. (bf16 four
  // rows as one warpgroup a block fills 228 KB with two blocks: no room for barriers.) The
  // query tile by one box: e4m3 rows only (kQueryTma); bf16 caches' queries are widened or
  // copied by the threads.
  static constexpr bool kTma = kRows > 1 && (kFp8 || kWarpgroups > 1);
  static constexpr bool kQueryTma = kTma && kFp8;  // one box of e4m3 rows (fp8 caches)
  // The slots' barriers and the query tile's (the TMA copies the group's query rows too).
  static constexpr int kBarrierBytes = kTma ? 8 * (kSlots + 1) : 0;
  // bf16 four rows a block split a step into two halves of N = 128 (rows 0-1, rows 2-3),
  // each with its own accumulators (the same 128 a thread): one half's epilogue runs while
  // the tensor core works on the other half (score_segment_split). Its two blocks an SM
  // leave the tensor core idle while both are in their epilogues; fp8's three blocks an SM
  // overlap one block's epilogue with the others' tensor work already, and there the split's
  // extra wait and barrier cost more than they hide (docs/key-path-speed.md).
  static constexpr bool kSplitStep = !kFp8 && kRows > 1 && kWarpgroups == 1;
  static constexpr int kSmemBytes =
      1024 + kQueryTileBytes + kSlots * kTileBytes + kScaleRingBytes + kWeightBytes + kBarrierBytes;

  static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64, "at most 64 heads: one 64-row query tile a row");
  static_assert(kRows == 1 || kRows == 4, "wgmma N = 64 or 256");
  static_assert(kPieceBytes == 16 || kPieceBytes == 4, "cp.async pieces of 16 or 4 bytes");
  static_assert(kWarpgroups == 1 || (!kFp8 && kTma && kWarpgroups == 2), "warpgroups in turn: bf16 four rows, TMA copies");
  static_assert(kWarpgroupThreads % kChunksPerRow == 0 && (kWarpgroupThreads / kChunksPerRow) % 8 == 0,
                "a thread's rows of a step share their row mod 8, so its swizzled chunk is fixed");
  static_assert(kBlocksPerSm * (kSmemBytes + 1024) <= 228 * 1024, "kBlocksPerSm blocks fit an SM (228 KB, 1 KB reserved per block)");
};

// Byte offset of 16-byte chunk c of row r in a tile of kTileRows rows (the header's layout:
// 64 for a key tile, 64 x kRows for the query tile).
template <int kTileRows>
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) {
  return (c / 8) * (kTileRows * 128) + r * 128 + (((c % 8) ^ (r % 8)) << 4);
}

// wgmma matrix descriptor of a K-major 128-byte-swizzled operand starting at `address`
// (PTX ISA, "Matrix Descriptor Format"): bits 0-13 address / 16, 16-29 leading byte offset
// / 16 (unused by swizzled K-major layouts; 1 by convention), 32-45 stride byte offset / 16
// (1024: the next 8 rows), 62-63 swizzle mode (1: 128 bytes). Base offset 0: every atom is
// 1024-byte aligned.
__device__ __forceinline__ uint64_t sw128_descriptor(uint32_t address) {
  constexpr uint64_t kLeading = 1, kStride = 1024 >> 4, kSwizzle128 = 1;
  return static_cast<uint64_t>((address & 0x3FFFFu) >> 4) | (kLeading << 16) | (kStride << 32) | (kSwizzle128 << 62);
}
// The descriptor's two words: the low one holds the address, the high one is a constant.
__device__ __forceinline__ uint32_t sw128_descriptor_low(uint32_t address) {
  return static_cast<uint32_t>(sw128_descriptor(address));
}
__device__ __forceinline__ uint64_t sw128_descriptor_from_low(uint32_t low) {
  return (sw128_descriptor(0) & ~uint64_t{0xFFFFFFFFu}) | low;
}

// D (+)= A x B for A a 64-key tile and B the block's query tile of N = 64 x kRows rows, one
// k slice, both from shared memory; accumulate false overwrites D. The instruction is
// asynchronous: wgmma_wait_all before D is read. N / 2 accumulators a thread.
#define DSAF_WGMMA_64X64(INSTRUCTION, OPERANDS)                                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" INSTRUCTION                                       \
               " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
               "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1" OPERANDS ";\n}\n"      \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),        \
                 "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),      \
                 "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),      \
                 "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                           \
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate))                                                 \
               : "memory")
#define DSAF_WGMMA_64X256(INSTRUCTION, OPERANDS)                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" INSTRUCTION " {"                                  \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "  \
               "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
               "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "  \
               "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
               "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"  \
               "}, %128, %129, p, 1, 1" OPERANDS ";\n}\n"                                                 \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),  \
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),  \
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),  \
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),  \
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
                 "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),  \
                 "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),  \
                 "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),  \
                 "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),  \
                 "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),  \
                 "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),  \
                 "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),  \
                 "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])  \
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate))                                                 \
               : "memory")
#define DSAF_WGMMA_64X128(INSTRUCTION, OPERANDS)                                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" INSTRUCTION " {"                                  \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"  \
               "}, %64, %65, p, 1, 1" OPERANDS ";\n}\n"                                                 \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])  \
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate))                                                 \
               : "memory")
template <bool kFp8, int kN>
__device__ __forceinline__ void wgmma_tile(float (&d)[kN / 2], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(kN == 64 || kN == 128 || kN == 256, "N = 64 (one query row), 128 (two) or 256 (four)");
  if constexpr (kN == 128) {
    static_assert(!kFp8, "N = 128: the split bf16 step (WgmmaTraits::kSplitStep)");
    DSAF_WGMMA_64X128("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", ", 0, 0");
  } else if constexpr (kN == 64) {
    if constexpr (kFp8) {
      // (e4m3 has no transpose operands: both K-major)
      DSAF_WGMMA_64X64("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", "");
    } else {
      DSAF_WGMMA_64X64("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", ", 0, 0");  // both K-major
    }
  } else {
    if constexpr (kFp8) {
      DSAF_WGMMA_64X256("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3", "");
    } else {
      DSAF_WGMMA_64X256("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", ", 0, 0");
    }
  }
}
#undef DSAF_WGMMA_64X64
#undef DSAF_WGMMA_64X256
#undef DSAF_WGMMA_64X128

// Orders this warp's earlier register accesses of the accumulators before the next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most one committed group of this warp's wgmma is still running.
__device__ __forceinline__ void wgmma_wait_all_but_one() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// The compiler does not know that wgmma writes the accumulators in the background: each
// is passed through an empty asm after the wait, so no read of it moves above the wait.
template <int kCount>
__device__ __forceinline__ void pin_accumulators(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Makes this thread's shared-memory writes (st.shared, cp.async: the generic proxy) visible
// to the tensor core's reads (the async proxy); a barrier then publishes them to the warpgroup.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Named barrier `id` (1-15; __syncthreads is 0) of `threads` threads: sync waits for them
// all, arrive counts this thread's warp without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The TMA path's primitives beside device/primitives/mbarrier.cuh's (PTX ISA: mbarrier,
// cp.async.bulk, cp.async.bulk.tensor). A slot's mbarrier counts one arrival (thread 0's
// expect_tx) and the bytes its copies bring; its phase completes when both are in, and the
// waiters see the copied bytes.
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Box (column byte c0, row c1) of the tensor map into shared memory at dst, counted on bar.
__device__ __forceinline__ void tma_load_box(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Two e4m3 codes (the low byte the low half) as two bf16 (exact: 3 mantissa bits, exponents
// 2^-9..2^8, all normal in f16 and in bf16): one e4m3x2 -> f16x2 conversion, the halves
// widened to f32 and packed to bf16x2.
__device__ __forceinline__ unsigned e4m3x2_to_bf16x2_bits(unsigned pair) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3));
  const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(h));
  return *reinterpret_cast<const unsigned*>(&b);
}

// 16-byte chunk c of query head `q` as stored (e4m3 for an fp8 cache, bf16 for a bf16
// one), in 4-byte words (the launcher checks 4-byte alignment).
__device__ __forceinline__ uint4 stored_query_chunk(const uint8_t* q, int c) {
  const unsigned* const w = reinterpret_cast<const unsigned*>(q + 16 * c);
  return make_uint4(w[0], w[1], w[2], w[3]);
}
// The 8 e4m3 codes of dims 8c..8c+7 of query head `q` (two 4-byte words), and their bf16
// chunk, dims in order.
__device__ __forceinline__ uint2 query_codes(const uint8_t* q, int c) {
  const unsigned* const w = reinterpret_cast<const unsigned*>(q + 8 * c);
  return make_uint2(w[0], w[1]);
}
__device__ __forceinline__ uint4 widen_e4m3_chunk(const uint2 codes) {
  return make_uint4(e4m3x2_to_bf16x2_bits(codes.x & 0xFFFFu), e4m3x2_to_bf16x2_bits(codes.x >> 16),
                    e4m3x2_to_bf16x2_bits(codes.y & 0xFFFFu), e4m3x2_to_bf16x2_bits(codes.y >> 16));
}

// A row group's rows (group g: rows kRows g + [0, count)), each with its sequence and its
// valid keys [0, valid), valid clamped to [0, max_context]. Loaded alike by every thread.
template <int kRows>
struct RowGroup {
  int first = 0, count = 0;
  int seq[kRows], valid[kRows];
};
template <int kRows>
__device__ __forceinline__ RowGroup<kRows> load_row_group(const PagedLogitsArgs& args, int g) {
  RowGroup<kRows> group;
  group.first = g * kRows;
  group.count = min(kRows, args.rows - group.first);
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
    const bool real = rr < group.count;
    group.seq[rr] = real ? __ldg(args.row_seq + group.first + rr) : -1;
    const int v = real ? __ldg(args.row_valid + group.first + rr) : 0;
    group.valid[rr] = v < 0 ? 0 : v > args.max_context ? static_cast<int>(args.max_context) : v;
  }
  return group;
}

// The group's next pass among the rows of `pending`: the rows of the lowest pending row's
// sequence (bit rr = row rr), `valid` the longest of their valid lengths. A group's passes
// are taken in this order everywhere (the work partition and the walk agree on it).
template <int kRows>
__device__ __forceinline__ unsigned next_pass(const RowGroup<kRows>& group, unsigned pending, int& seq, int& valid) {
  const int lead = __ffs(static_cast<int>(pending)) - 1;
  seq = group.seq[0];
#pragma unroll
  for (int rr = 1; rr < kRows; ++rr) seq = rr == lead ? group.seq[rr] : seq;
  unsigned pass = 0u;
  valid = 0;
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
    if ((pending >> rr & 1u) != 0u && group.seq[rr] == seq) pass |= 1u << rr, valid = max(valid, group.valid[rr]);
  }
  return pass;
}

// A group's work in steps: `scored`, the steps its passes score (each pass up to its
// longest valid key), and `masked`, the steps after them that only get -inf (each pass to
// max_context, steps_per_row steps a row).
template <int kRows>
__device__ __forceinline__ void group_work(const RowGroup<kRows>& group, int steps_per_row, int64_t& scored,
                                           int64_t& masked) {
  scored = 0;
  masked = 0;
  unsigned pending = (1u << group.count) - 1u;
  while (pending != 0u) {
    int seq, valid;
    const unsigned pass = next_pass(group, pending, seq, valid);
    pending &= ~pass;
    const int pass_steps = (valid + kStepKeys - 1) / kStepKeys;
    scored += pass_steps;
    masked += steps_per_row - pass_steps;
  }
}

// Inclusive prefix sums of (a, b) over the block's threads, and their totals. `scratch`:
// 2 x kWarps int64 of shared memory; every thread calls it.
template <int kThreads>
__device__ __forceinline__ void block_scan_pair(int64_t& a, int64_t& b, int64_t* scratch, int64_t& total_a,
                                                int64_t& total_b) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t x = __shfl_up_sync(kFullMask, a, o), y = __shfl_up_sync(kFullMask, b, o);
    if (lane >= o) a += x, b += y;
  }
  if (lane == 31) scratch[warp] = a, scratch[kWarps + warp] = b;
  __syncthreads();
  total_a = 0;
  total_b = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) a += scratch[w], b += scratch[kWarps + w];
    total_a += scratch[w];
    total_b += scratch[kWarps + w];
  }
  __syncthreads();  // scratch is reused
}

// A block's share of the scored (or masked) steps laid end to end: it starts in group
// `group`, after the first `skip` of that group's steps, and holds `count` steps.
struct WorkShare {
  int group = 0, skip = 0, count = 0;
};

// Walks a share group after group, pass after pass (next_pass's order), and calls
// f(pass, pass_steps, begin, end) for each pass's part [begin, end) of it, counted from the
// pass's first scored step (kMasked false) or from its first masked step, pass_steps being
// its scored steps; `group`, `valid` (the pass's longest valid length) and `table_row` (its
// sequence's page-table row) are set for f. Only the walk's position lives across f: a
// group's rows are read again at each of its passes.
template <bool kMasked, int kRows, class F>
__device__ __forceinline__ void walk_share(const PagedLogitsArgs& args, int steps_per_row, const WorkShare& share,
                                           RowGroup<kRows>& group, int& valid, const int32_t*& table_row, F f) {
  const int groups = (args.rows + kRows - 1) / kRows;
  int at = share.group, p = 0, skip = share.skip, left = share.count;
  while (left > 0 && at < groups) {
    group = load_row_group<kRows>(args, at);
    unsigned pending = (1u << group.count) - 1u, pass = 0u;
    int seq = 0;
    for (int q = 0; q <= p; ++q) {  // the group's pass p (p < its passes)
      pass = next_pass(group, pending, seq, valid);
      pending &= ~pass;
    }
    const int pass_steps = (valid + kStepKeys - 1) / kStepKeys;
    const int steps = kMasked ? steps_per_row - pass_steps : pass_steps;
    if (pending == 0u) {
      ++at, p = 0;
    } else {
      ++p;
    }
    if (skip >= steps) {
      skip -= steps;
      continue;
    }
    const int begin = skip, end = skip + left < steps ? skip + left : steps;
    skip = 0;
    left -= end - begin;
    table_row = args.page_tables + static_cast<int64_t>(seq) * args.page_table_stride;
    f(pass, pass_steps, begin, end);
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kBlocksPerSm)
    paged_logits_mma_kernel(const PagedLogitsArgs args, const __grid_constant__ CUtensorMap key_map, bool use_tma,
                            const __grid_constant__ CUtensorMap query_map, bool use_query_tma, const int* route) {
  // Routed launches (launch_format): the instance route_rows did not choose leaves at once.
  if (route != nullptr && *route != T::kRows) return;
  extern __shared__ __align__(1024) uint8_t smem[];
  // Tiles from the first 1024-byte boundary (the slack is in kSmemBytes).
  const uint32_t smem_base = shared_address(smem);
  const uint32_t pad = ((smem_base + 1023u) & ~1023u) - smem_base;
  uint8_t* const query_tile = smem + pad;
  const uint32_t query_address = smem_base + pad;
  const uint32_t ring = query_address + T::kQueryTileBytes;  // [slot][64-key tile]
  const uint32_t scale_ring = ring + T::kSlots * T::kTileBytes;  // [slot][key] fp32
  const float* const scales = reinterpret_cast<const float*>(query_tile + T::kQueryTileBytes + T::kSlots * T::kTileBytes);
  // The TMA path's slot barriers, after the weights (8-byte aligned: every region before
  // them is a multiple of 8 bytes).
  // Slot w x kStages + s is warpgroup w's local slot s; the last barrier is the query tile's.
  uint64_t* const slot_barriers = reinterpret_cast<uint64_t*>(query_tile + T::kQueryTileBytes + T::kSlots * T::kTileBytes +
                                                             T::kScaleRingBytes + T::kWeightBytes);
  uint64_t* const query_barrier = slot_barriers + T::kSlots;
  // Bit s: the parity of the next phase of this thread's warpgroup's local slot s; bit
  // kStages: the query tile's.
  uint32_t barrier_phases = 0;
  if constexpr (T::kTma) {
    if ((use_tma || T::kWarpgroups > 1) && threadIdx.x == 0) {
      for (int s = 0; s <= T::kSlots; ++s) barrier_init(slot_barriers + s, 1);
      fence_mbarrier_init();
      fence_proxy_async();  // the initialised barriers, for the copy engine
    }
    // (the work partition's barriers below publish the initialisation)
  }
  const int max_context = static_cast<int>(args.max_context);
  const int steps_per_row = (max_context + T::kKeysPerStep - 1) / T::kKeysPerStep;
  // `warp` counts within the warpgroup (the accumulator fragment's w).
  const int thread = threadIdx.x, lane = thread % 32;
  const int warpgroup = T::kWarpgroups > 1 ? thread / T::kWarpgroupThreads : 0;
  const int warpgroup_thread = T::kWarpgroups > 1 ? thread % T::kWarpgroupThreads : thread;
  const int warp = warpgroup_thread / 32;
  const int g = lane / 4, t = lane % 4;

  // 0. The work partition. Each group's passes' scored steps, laid end to end in group
  //    order, are cut into gridDim.x equal contiguous shares, share b being
  //    [b S / B, (b + 1) S / B) (which block takes which: below); the masked steps
  //    likewise. So every block gets the same number of steps (+-1) however the rows'
  //    valid lengths differ, in one wave (the launcher's grid): a block pays its set-up
  //    once per group it enters (a share of ~100 steps of a 128K-key sequence enters one
  //    or two; with short contexts and many rows a share spans many groups, each entered
  //    once). The scans read every group's rows: O(groups) work a block, small beside its
  //    steps unless contexts are short. Every block finds its starts from the rows' valid
  //    lengths (two scans over the groups, kThreads groups a round; the ring, not yet in
  //    use, holds the scan's scratch).
  const int groups = (args.rows + T::kRows - 1) / T::kRows;
  int64_t* const scan_scratch = reinterpret_cast<int64_t*>(query_tile + T::kQueryTileBytes);
  int64_t scored_total = 0, masked_total = 0;
  {
    int64_t scored = 0, masked = 0;
    for (int group = thread; group < groups; group += T::kThreads) {
      int64_t s, m;
      group_work(load_row_group<T::kRows>(args, group), steps_per_row, s, m);
      scored += s;
      masked += m;
    }
    block_scan_pair<T::kThreads>(scored, masked, scan_scratch, scored_total, masked_total);
  }
  // Block blockIdx.x takes share b: the blocks that share an SM take consecutive shares. A
  // one-wave grid's blocks are placed round-robin over the SMs (block i on SM i mod SMs),
  // so blocks i and i + SMs share one; with share i each, two such blocks can start at the
  // same key of two groups' passes (rows spread evenly over [N/2, N) make blocks i and
  // i + 132 of 264 do exactly that), copy the same key tiles at the same moments and stall
  // together (docs/key-path-speed.md). Consecutive shares read different keys. Any
  // bijection of shares to blocks gives the same bits (blocks_for); this one assumes
  // gridDim.x = SMs x kBlocksPerSm and is a bijection whenever kBlocksPerSm divides
  // gridDim.x (else the identity).
  const int64_t blocks = gridDim.x, wave = blocks / T::kBlocksPerSm;
  const int64_t b =
      blocks % T::kBlocksPerSm == 0 ? T::kBlocksPerSm * (blockIdx.x % wave) + blockIdx.x / wave : blockIdx.x;
  const int64_t scored_begin = scored_total * b / blocks, scored_end = scored_total * (b + 1) / blocks;
  const int64_t masked_begin = masked_total * b / blocks, masked_end = masked_total * (b + 1) / blocks;
  WorkShare scored, masked;  // the launcher keeps every count below 2^31 (launch_paged_logits_fast)
  scored.count = static_cast<int>(scored_end - scored_begin);
  masked.count = static_cast<int>(masked_end - masked_begin);
  {
    auto* const found = scan_scratch + 2 * (T::kThreads / 32);  // [group, skip] of scored, then of masked
    if (thread == 0) found[0] = -1, found[1] = 0, found[2] = -1, found[3] = 0;
    __syncthreads();
    int64_t scored_before = 0, masked_before = 0;  // the steps of the groups of earlier rounds
    for (int round_first = 0; round_first < groups; round_first += T::kThreads) {
      const int group = round_first + thread;
      int64_t s = 0, m = 0;
      if (group < groups) group_work(load_row_group<T::kRows>(args, group), steps_per_row, s, m);
      int64_t s_incl = s, m_incl = m, s_round, m_round;
      block_scan_pair<T::kThreads>(s_incl, m_incl, scan_scratch, s_round, m_round);
      const int64_t s_at = scored_before + s_incl - s, m_at = masked_before + m_incl - m;  // this group's first steps
      if (s > 0 && s_at <= scored_begin && scored_begin < s_at + s) found[0] = group, found[1] = scored_begin - s_at;
      if (m > 0 && m_at <= masked_begin && masked_begin < m_at + m) found[2] = group, found[3] = masked_begin - m_at;
      scored_before += s_round;
      masked_before += m_round;
      __syncthreads();
      const bool done = (found[0] >= 0 || scored.count == 0) && (found[2] >= 0 || masked.count == 0);
      if (done) break;  // uniform: every thread read the same flags after the barrier
    }
    scored.group = found[0] < 0 ? 0 : static_cast<int>(found[0]);
    scored.skip = static_cast<int>(found[1]);
    masked.group = found[2] < 0 ? 0 : static_cast<int>(found[2]);
    masked.skip = static_cast<int>(found[3]);
    // The scratch's generic stores are ordered before the copy engine's writes to the
    // same ring bytes (the first steps' TMA copies) only through the async proxy: each
    // writing thread fences, then the barrier below orders the fences before the copies.
    if constexpr (T::kTma) fence_proxy_async();
    __syncthreads();  // the ring is refilled below
  }

  // The current group's rows (the epilogue's stores read them).
  RowGroup<T::kRows> group;
  const auto out = [&](int rr) { return args.logits + static_cast<int64_t>(group.first + rr) * args.max_context; };
  float* group_out = nullptr;  // out(0) of the group whose inputs are loaded (the scored steps' stores)

  // 1. A group's shared inputs: the query tile (query row rr's head h at tile row
  //    64 rr + h; heads past kHeads and rows past the group zero), this lane's head weights.
  //    Loaded when the block enters the group, after every read of the previous group's.
  const int q_head_bytes = args.q_format == StorageFormat::kFp8E4m3fn ? 128 : 256;  // e4m3 or bf16 values
  constexpr int kQueryChunks = T::kQueryRows * T::kChunksPerRow;
  // The head weights: in registers, row rr's heads 8n + 2t + c (the columns of this lane's
  // accumulators); or in shared memory, [row][m][t][4] for heads 8n + 2t + c, n = 2m + n % 2
  // (heads past kHeads zero): a lane reads four at a time, the quad's four lanes 64
  // consecutive bytes (no bank conflict).
  float w_reg[T::kWeightsInSmem ? 1 : T::kRows][T::kWeightsInSmem ? 1 : T::kHeadTiles][2];
  float* const w_smem = reinterpret_cast<float*>(query_tile + T::kQueryTileBytes + T::kSlots * T::kTileBytes +
                                                 T::kScaleRingBytes);
  const auto load_group_inputs = [&]() {
    bool query_by_tma = false;
    if constexpr (T::kQueryTma) {
      // The group's kRows x 64 head rows of 128 bytes are contiguous in q_values: one box
      // of 256 rows, 128-byte swizzled as the tile's layout; rows past the batch are zero
      // (out of the map's bounds).
      if (use_query_tma) {
        if (thread == 0) {
          const uint32_t bar = shared_address(query_barrier);
          mbarrier_expect_bytes(bar, T::kQueryTileBytes);
          tma_load_box(query_address, &query_map, 0, group.first * T::kHeads, bar);
        }
        query_by_tma = true;
      }
    }
    if (!query_by_tma) {
      static_assert(kQueryChunks % T::kThreads == 0, "whole rounds");
      // Round r of a thread: tile row i / kChunksPerRow, chunk i % kChunksPerRow, i = r x
      // kThreads + thread; the head it copies (null: a zero row past kHeads or the group).
      constexpr int kRounds = kQueryChunks / T::kThreads;
      const auto head_of = [&](int round) -> const uint8_t* {
        const int tile_row = (round * T::kThreads + thread) / T::kChunksPerRow, rr = tile_row / 64, h = tile_row % 64;
        return h < T::kHeads && rr < group.count
                   ? args.q_values + (static_cast<int64_t>(group.first + rr) * T::kHeads + h) * q_head_bytes
                   : nullptr;
      };
      const auto tile_chunk = [&](int round) -> uint4& {
        const int i = round * T::kThreads + thread;
        return *reinterpret_cast<uint4*>(query_tile + sw128_offset<T::kQueryRows>(i / T::kChunksPerRow, i % T::kChunksPerRow));
      };
      const int c = thread % T::kChunksPerRow;  // the same chunk every round (kThreads % kChunksPerRow == 0)
      if (!T::kFp8 && args.q_format == StorageFormat::kFp8E4m3fn) {
        // Every round's codes first, all in flight, then widened: widening each chunk as it
        // arrives would wait for the loads one at a time.
        uint2 codes[kRounds];
#pragma unroll
        for (int round = 0; round < kRounds; ++round) {
          const uint8_t* const head = head_of(round);
          codes[round] = head != nullptr ? query_codes(head, c) : make_uint2(0, 0);
        }
#pragma unroll
        for (int round = 0; round < kRounds; ++round) tile_chunk(round) = widen_e4m3_chunk(codes[round]);
      } else {
#pragma unroll
        for (int round = 0; round < kRounds; ++round) {  // every thread's loads in flight at once
          const uint8_t* const head = head_of(round);
          tile_chunk(round) = head != nullptr ? stored_query_chunk(head, c) : make_uint4(0, 0, 0, 0);
        }
      }
      fence_proxy_async();  // the tile is read by the tensor core (the barrier below publishes it)
    }
    if constexpr (T::kWeightsInSmem) {
      for (int i = thread; i < T::kRows * 64; i += T::kThreads) {
        const int rr = i / 64, h = i % 64;  // head h = 8n + 2t + c
        const int n = h / 8, t_of_h = (h % 8) / 2;
        const int slot = rr * 64 + (n / 2) * 16 + t_of_h * 4 + (n % 2) * 2 + h % 2;
        w_smem[slot] = rr < group.count && h < T::kHeads ? args.weights[static_cast<int64_t>(group.first + rr) * T::kHeads + h] : 0.0f;
      }
    } else {
#pragma unroll
      for (int rr = 0; rr < T::kRows; ++rr) {
#pragma unroll
        for (int n = 0; n < T::kHeadTiles; ++n) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            w_reg[rr][n][c] =
                rr < group.count ? args.weights[static_cast<int64_t>(group.first + rr) * T::kHeads + 8 * n + 2 * t + c] : 0.0f;
          }
        }
      }
    }
    __syncthreads();
    if (query_by_tma) {
      barrier_wait(query_barrier, barrier_phases >> T::kStages & 1u);
      barrier_phases ^= 1u << T::kStages;
    }
  };
  // Row rr's heads 8n + 2t + c for n = 2m, 2m + 1 (x, y: n = 2m; z, w: n = 2m + 1).
  const auto weight_quad = [&](int rr, int m) {
    if constexpr (T::kWeightsInSmem) {
      return *reinterpret_cast<const float4*>(w_smem + rr * 64 + 16 * m + 4 * t);
    } else {
      return make_float4(w_reg[rr][2 * m][0], w_reg[rr][2 * m][1], w_reg[rr][2 * m + 1][0], w_reg[rr][2 * m + 1][1]);
    }
  };

  // 2. A pass's steps [step_begin, step_end): its rows' scores of keys 64 step_begin ..,
  //    every row of the pass scored against the sequence's keys (one copy of each key
  //    tile for all of them); only the pass's rows are stored.
  const int shift = __ffs(args.page_size) - 1;  // log2 P (the launcher checks P is a power of two)
  // Page-table entries are read where a step's copies are issued, through L1: a row's
  // entries are contiguous, so one 128-byte line serves 32 pages (2,048 keys at page 64).
  const int32_t* table_row = nullptr;
  int valid = 0;            // the pass's longest valid length
  int segment_first = 0;    // the pass segment's first key (a multiple of 64)
  int segment_end = 0;      // and its end, at most `valid` rounded up to a step

  // The segment's steps: step i holds keys segment_first + 64 i + [0, 64) in ring slot
  // i % kStages. Chunk c of a key row is copied by thread c + kChunksPerRow x (key mod
  // kKeysPerPass), 16 bytes (in 4-byte pieces when kPieceBytes is 4), so one warp
  // instruction reads whole 128-byte lines and L2 serves each line in one request (one
  // sector of many lines per instruction, measured, kept the L2 busy at half the DRAM
  // rate). Keys past `valid` are zero-filled from an address that is valid and not read
  // (the TMA path copies the page's bytes there: their scores are -inf by the stores'
  // mask either way); steps past the segment copy nothing. fp8: thread k < 64 also copies
  // key k's scale.
  constexpr int kKeysPerPass = T::kWarpgroupThreads / T::kChunksPerRow, kPasses = T::kKeysPerStep / kKeysPerPass;
  const int pass_key = thread / T::kChunksPerRow, chunk = thread % T::kChunksPerRow;
  // Every key pass_key + kKeysPerPass x j has the row mod 8 of pass_key: one swizzled offset.
  const uint32_t dst_thread = ring + sw128_offset<64>(pass_key, chunk);
  const int src_thread = pass_key * T::kRowBytes + 16 * chunk;  // its chunk's bytes from a step's first row
  const uint32_t page_bytes = static_cast<uint32_t>(args.page_size) * (T::kRowBytes + T::kScaleBytes);
  const uint32_t scale_region = static_cast<uint32_t>(args.page_size) * T::kRowBytes;
  const int offset_mask = args.page_size - 1;
  // Steps start at multiples of 64, so with pages at least that long a step lies in one
  // page: one page-table read per step instead of one per key.
  const bool step_in_one_page = args.page_size >= T::kKeysPerStep;
  const auto page_of = [&](int key) {  // the page of a valid key
    return args.cache + static_cast<uint64_t>(static_cast<uint32_t>(__ldg(table_row + (key >> shift)))) * page_bytes;
  };
  const auto step_first = [&](int i) { return segment_first + i * T::kKeysPerStep; };
  // Step i's warpgroup is i mod kWarpgroups, its ring slot that warpgroup's local slot
  // (i / kWarpgroups) mod kStages.
  const auto slot_of = [](int i) { return (i % T::kWarpgroups) * T::kStages + (i / T::kWarpgroups) % T::kStages; };
  // The map's rows a page (kTma): rows of kRowBytes, a page's keys then, fp8, its scales
  // (page_size / 32 rows). Row coordinates are int32: caches of up to 2^31 rows; the
  // launcher's tile_map bound.
  const int rows_per_page = args.page_size * (T::kRowBytes + T::kScaleBytes) / T::kRowBytes;
  const auto issue = [&](int i) {
    const int first = step_first(i);
    if constexpr (T::kTma) {
      // A step lies in one page (use_tma needs pages of at least a step; warpgroups in turn
      // always copy by the TMA, the launcher).
      if (use_tma || T::kWarpgroups > 1) {
        if (first < segment_end && warpgroup_thread == 0) {  // the step's own warpgroup calls
          const int slot = slot_of(i);
          const uint32_t bar = shared_address(slot_barriers + slot);
          const uint32_t page = static_cast<uint32_t>(__ldg(table_row + (first >> shift)));
          const int first_offset = first & offset_mask;
          mbarrier_expect_bytes(bar, T::kTileBytes + T::kKeysPerStep * T::kScaleBytes);
#pragma unroll
          for (int block = 0; block < T::kRowBytes / 128; ++block) {
            tma_load_box(ring + slot * T::kTileBytes + block * (64 * 128), &key_map, 128 * block,
                         static_cast<int>(page) * rows_per_page + first_offset, bar);
          }
          if constexpr (T::kFp8) {
            bulk_load(scale_ring + 4 * slot * T::kKeysPerStep,
                      args.cache + static_cast<uint64_t>(page) * page_bytes + scale_region + first_offset * T::kScaleBytes,
                      T::kKeysPerStep * T::kScaleBytes, bar);
          }
        }
        return;
      }
    }
    if constexpr (T::kWarpgroups == 1) {
      if (first < segment_end) {  // segment_end <= valid rounded up: first < valid
        const int slot = i % T::kStages;
        // Addresses first, then the copies back to back (ptxas pads each run of cp.async).
        const uint8_t* src[kPasses];
        bool read[kPasses];
        const uint8_t* scale = nullptr;
        if (step_in_one_page) {
          const uint8_t* const page = page_of(first);
          const int first_offset = first & offset_mask;  // + 63 stays inside the page
          // This thread's first row chunk; pass j's is kKeysPerPass x j rows further.
          const uint8_t* const base = page + (first_offset * T::kRowBytes + src_thread);
          const int left = valid - first - pass_key;  // pass j reads while kKeysPerPass x j < left
#pragma unroll
          for (int j = 0; j < kPasses; ++j) {
            read[j] = kKeysPerPass * j < left;
            src[j] = base + kKeysPerPass * j * T::kRowBytes;
          }
          if constexpr (T::kFp8) scale = page + (scale_region + (first_offset + thread % 64) * T::kScaleBytes);
        } else {
#pragma unroll
          for (int j = 0; j < kPasses; ++j) {
            const int s = first + pass_key + kKeysPerPass * j;
            read[j] = s < valid;
            const int key = min(s, valid - 1);  // the table may hold anything past the valid pages
            src[j] = page_of(key) + ((key & offset_mask) * T::kRowBytes + 16 * chunk);
          }
          if constexpr (T::kFp8) {
            const int key = min(first + thread % 64, valid - 1);
            scale = page_of(key) + (scale_region + (key & offset_mask) * T::kScaleBytes);
          }
        }
#pragma unroll
        for (int j = 0; j < kPasses; ++j) {
          const uint32_t dst = dst_thread + slot * T::kTileBytes + kKeysPerPass * j * 128;
#pragma unroll
          for (int p = 0; p < 16 / T::kPieceBytes; ++p) {
            copy_async<T::kPieceBytes>(dst + T::kPieceBytes * p, src[j] + T::kPieceBytes * p, read[j]);
          }
        }
        if constexpr (T::kFp8) {
          if (thread < 64) {
            copy_async<4>(scale_ring + 4 * (slot * T::kKeysPerStep + thread), scale, first + thread < valid);
          }
        }
      }
      commit_async();  // an empty group keeps the group count uniform
    }
  };

  // The key this lane stores after the quad reduction (see there).
  const int store_key = 16 * warp + 8 * t + g;  // t < 2
  using Accumulators = float[T::kAccumulators];  // a segment's own (score_segment)

  // Epilogue of the step at key `first`, for the pass's rows, `scale` the fp8 key scale of
  // key first + store_key: ReLU, times the head weight into a running sum over the lane's
  // heads: v0[rr] for key 16w + g, v1[rr] for key 16w + g + 8 (row rr's columns are
  // 64 rr + [0, 64)). Every row's sums are formed, the pass's rows stored: without a branch
  // per row the 2 x kRows chains of dependent FMAs interleave, and each chain's order (and
  // so every bit) is the one a row alone would give.
  // Rows kFirstRow .. kFirstRow + kCount - 1 of the group from their accumulators alone
  // (acc: 32 kCount, laid out as a kCount-row block's): the whole step, or one half of a
  // split step (each row's chains are the same either way).
  const auto epilogue_rows = [&](auto first_row, const auto& acc, int first, float scale, unsigned pass) {
    constexpr int kFirstRow = decltype(first_row)::value;
    constexpr int kCount = static_cast<int>(std::extent<std::remove_reference_t<decltype(acc)>>::value) / 32;
    float v0[kCount], v1[kCount];
#pragma unroll
    for (int rr = 0; rr < kCount; ++rr) v0[rr] = 0.0f, v1[rr] = 0.0f;
    static_assert(T::kHeadTiles % 2 == 0, "head tiles in pairs (weight_quad)");
#pragma unroll
    for (int m = 0; m < T::kHeadTiles / 2; ++m) {
      float4 wq[kCount];
#pragma unroll
      for (int rr = 0; rr < kCount; ++rr) wq[rr] = weight_quad(kFirstRow + rr, m);
#pragma unroll
      for (int n = 2 * m; n < 2 * m + 2; ++n) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
#pragma unroll
          for (int rr = 0; rr < kCount; ++rr) {
            const int a = 32 * rr + 4 * n + c;
            const float wc = n == 2 * m ? (c == 0 ? wq[rr].x : wq[rr].y) : (c == 0 ? wq[rr].z : wq[rr].w);
            v0[rr] = __fmaf_rn(fmaxf(acc[a], 0.0f), wc, v0[rr]);  // fmaxf(NaN, 0) = 0, as score.cc
            v1[rr] = __fmaf_rn(fmaxf(acc[a + 2], 0.0f), wc, v1[rr]);
          }
        }
      }
    }
    // Sum over the quad (lanes t = 0..3 hold the same keys, different heads): lane t ends
    // with the total of its key 16w + 8 (t % 2) + g, formed from the lanes' partial sums
    // p_0..p_3 as (p0 + p1) + (p2 + p3) (lanes t and t ^ 2 add the same pairs: fadd is
    // commutative).
    const bool up1 = t & 1;
    float sum[kCount];
#pragma unroll
    for (int rr = 0; rr < kCount; ++rr) {
      sum[rr] = __fadd_rn(up1 ? v1[rr] : v0[rr], __shfl_xor_sync(kFullMask, up1 ? v0[rr] : v1[rr], 1));
    }
#pragma unroll
    for (int rr = 0; rr < kCount; ++rr) sum[rr] = __fadd_rn(sum[rr], __shfl_xor_sync(kFullMask, sum[rr], 2));
    const int s = first + store_key;
    if (t < 2 && s < max_context) {
      float* row_out = group_out + s + static_cast<int64_t>(kFirstRow) * args.max_context;
#pragma unroll
      for (int rr = 0; rr < kCount; ++rr, row_out += args.max_context) {
        const int row = kFirstRow + rr;
        const float score = s < group.valid[row] ? (T::kFp8 ? __fmul_rn(sum[rr], scale) : sum[rr]) : -INFINITY;
        if ((pass >> row & 1u) != 0u) *row_out = score;
      }
    }
  };
  const auto epilogue = [&](const Accumulators& acc, int first, float scale, unsigned pass) {
    epilogue_rows(std::integral_constant<int, 0>{}, acc, first, scale, pass);
  };
  // Dots: acc = keys x (rows x heads) of the step in `slot`, over the kSlices k slices.
  // A tile's descriptor at byte offset o from the tile is its start's plus o / 16 (the
  // address field, bits 0-13, holds address / 16 of an address below 2^18: shared memory
  // ends at 228 KB, so the field never carries), so the slot's and the slice's offsets are
  // added to the low word formed once; the high word is the same for every operand.
  const uint32_t key_desc_low = sw128_descriptor_low(ring), query_desc_low = sw128_descriptor_low(query_address);
  // acc (N / 2 a thread) = the key tile x query rows [first_query_row, + N), N = 64 x kRows
  // for a whole step or half that for one half of a split step (the query tile's row 128 is
  // 1024-byte aligned: whole swizzle atoms).
  const auto dots_rows = [&](auto& acc, int slot, int first_query_row) {
    constexpr int kN = 2 * static_cast<int>(std::extent<std::remove_reference_t<decltype(acc)>>::value);
    wgmma_fence();
    const uint32_t key_tile_low = key_desc_low + slot * (T::kTileBytes / 16);
    const uint32_t query_low = query_desc_low + first_query_row * 128 / 16;
#pragma unroll
    for (int s = 0; s < T::kSlices; ++s) {
      const uint32_t slice = (s % 4) * 32;  // within the 128-byte column block s / 4
      wgmma_tile<T::kFp8, kN>(acc, sw128_descriptor_from_low(key_tile_low + ((s / 4) * (64 * 128) + slice) / 16),
                              sw128_descriptor_from_low(query_low + ((s / 4) * (T::kQueryRows * 128) + slice) / 16),
                              s > 0);
    }
    wgmma_commit();
  };
  const auto dots = [&](Accumulators& acc, int slot) { dots_rows(acc, slot, 0); };
  // The split steps (WgmmaTraits::kSplitStep; bf16, no key scale): A(i), B(i) the halves of
  // step i (rows 0-1 into acc0, rows 2-3 into acc1); committed wgmma groups complete in
  // order. Step i: await tile i; issue A(i); B(i - 1)'s epilogue (A(i) runs); issue B(i);
  // wait for A(i), A(i)'s epilogue (B(i) runs); wait for B(i); barrier (every warp is done
  // with slot i: refill it with step i + kStages). So a half is on the tensor core during
  // each epilogue, and every wgmma is awaited in the iteration that issued it: ptxas
  // serialises all wgmma of a kernel whose loop reads accumulators while a wgmma of an
  // earlier iteration may still be in flight (warning C7514). Each row's epilogue chains
  // and each column's dot product are the whole step's, so the logits keep their bits.
  const auto score_segment_split = [&](unsigned pass, int step_begin, int step_end) {
    if constexpr (T::kSplitStep) {
      float acc0[T::kAccumulators / 2], acc1[T::kAccumulators / 2];
#pragma unroll
      for (int i = 0; i < T::kAccumulators / 2; ++i) acc0[i] = 0.0f, acc1[i] = 0.0f;
      const int steps = step_end - step_begin;
      constexpr std::integral_constant<int, 0> kRow0{};
      constexpr std::integral_constant<int, 2> kRow2{};
      // Step i up to B(i) awaited and its slot refilled; B(i)'s epilogue is left to the
      // next step, or the segment's end.
      const auto step = [&](int i, auto with_previous_b) {
        const int slot = i % T::kStages;
        wait_async<T::kStages - 1>();  // this thread's copies of step i have landed
        fence_proxy_async();           // ... for the tensor core
        __syncthreads();               // ... and every thread's
        dots_rows(acc0, slot, 0);
        if constexpr (decltype(with_previous_b)::value) epilogue_rows(kRow2, acc1, step_first(i - 1), 1.0f, pass);
        dots_rows(acc1, slot, 128);
        wgmma_wait_all_but_one();  // A(i)
        pin_accumulators(acc0);
        epilogue_rows(kRow0, acc0, step_first(i), 1.0f, pass);
        wgmma_wait_all();  // B(i)
        pin_accumulators(acc1);
        __syncthreads();
        issue(i + T::kStages);
      };
      step(0, std::false_type{});
#pragma unroll 1
      for (int i = 1; i < steps; ++i) step(i, std::true_type{});
      epilogue_rows(kRow2, acc1, step_first(steps - 1), 1.0f, pass);
      wait_async<0>();  // the empty groups of the steps past the segment
      __syncthreads();  // every thread is done with the ring (and the group's inputs)
    }
  };
  // Scores the pass's steps [step_begin, step_end) a whole step at a time (`valid`, `table_row`
  // and the group's inputs set); score_segment takes the split or the whole steps.
  const auto score_segment_whole = [&](unsigned pass, int step_begin, int step_end) {
    // Defined here (each step's first wgmma overwrites them), so that nothing holds them
    // between segments, where a group's inputs are loaded.
    float acc[T::kAccumulators];
#pragma unroll
    for (int i = 0; i < T::kAccumulators; ++i) acc[i] = 0.0f;
#pragma unroll 1
    for (int i = 0;; ++i) {
      const int first = step_first(i);
      if (first >= segment_end) break;  // uniform per block
      bool copies_awaited = false;
      if constexpr (T::kTma) {
        if (use_tma) {  // step i's tile and scales have landed (the async proxy wrote them)
          const int slot = i % T::kStages;
          barrier_wait(slot_barriers + slot, barrier_phases >> slot & 1u);
          barrier_phases ^= 1u << slot;
          copies_awaited = true;
        }
      }
      if (!copies_awaited) {
        wait_async<T::kStages - 2>();  // this thread's copies of step i have landed
        fence_proxy_async();           // ... for the tensor core
      }
      // Every thread's copies of step i are visible, and every thread is past step i - 1's
      // wgmma_wait_all: its slot may be refilled.
      __syncthreads();
      const int slot = i % T::kStages;
      // The next copies go into step i - 1's slot, free since the barrier. fp8 four rows a
      // block (arithmetic-bound; the tensor step is the shortest of the variants, 4 k32
      // instructions): the tensor core is started first, the copies issued while it works.
      // The rest (memory-bound, or bf16's 8 instructions, whose step outlasts the copies'
      // latency either way): the copies first, their loads started as early as possible;
      // fp8 one row at 5 blocks an SM also has no registers for the copies' addresses
      // beside the live accumulators.
      constexpr bool kCopiesUnderTensor = T::kFp8 && T::kRows > 1;
      if constexpr (!kCopiesUnderTensor) issue(i + T::kStages - 1);
      dots(acc, slot);
      if constexpr (kCopiesUnderTensor) issue(i + T::kStages - 1);
      float scale = 1.0f;  // lanes t >= 2 store nothing: their read stays in the slot
      if constexpr (T::kFp8) scale = scales[slot * T::kKeysPerStep + store_key % T::kKeysPerStep];
      wgmma_wait_all();
      pin_accumulators(acc);
      epilogue(acc, first, scale, pass);
    }
    // Nothing in flight into shared memory at the next segment or at exit (the TMA path
    // issues only steps of the segment, and waited for each).
    wait_async<0>();
    __syncthreads();  // every thread is done with the ring (and the group's inputs)
  };
  // Warpgroups in turn (kWarpgroups = W > 1, sharing the group's query tile): the segment's
  // step i is warpgroup i mod W's, in its local slot (slot_of), and the warpgroups issue
  // their wgmma in turn, round after round (round j: steps W j .. W j + W - 1). Warpgroup w
  // waits at named barrier 1 + w until warpgroup w - 1 has issued its wgmma of the round
  // (warpgroup 0: warpgroup W - 1's of the round before), issues its own and lets w + 1 go,
  // so the tensor core takes the steps in order and each warpgroup's epilogue runs under
  // the others' wgmma; blocks of one warpgroup meet at the tensor core by chance. The turn's
  // barrier holds all of the warpgroup's threads, so each is past the previous step's
  // wgmma_wait_all and that step's slot may be refilled. Every warpgroup takes all
  // ceil(steps / W) rounds of a segment (in the last, some without a step), so the turns'
  // arrivals and waits balance across segments: warpgroup W - 1 arrives once before the
  // first segment, and warpgroup 0 waits once after the last. Which warpgroup scores a key
  // does not change its score (the same instructions, the same epilogue).
  // (The barrier ids from threadIdx.x at each use: cheaper than a register kept live.)
  const auto turn_wait = []() { named_barrier_sync(1 + threadIdx.x / T::kWarpgroupThreads, 2 * T::kWarpgroupThreads); };
  const auto turn_pass = []() {
    named_barrier_arrive(1 + (threadIdx.x / T::kWarpgroupThreads + 1) % T::kWarpgroups, 2 * T::kWarpgroupThreads);
  };
  const auto score_segment_turns = [&](unsigned pass, int step_begin, int step_end) {
    if constexpr (T::kWarpgroups > 1) {
      float acc[T::kAccumulators];
#pragma unroll
      for (int i = 0; i < T::kAccumulators; ++i) acc[i] = 0.0f;
      constexpr int W = T::kWarpgroups;
      // Round j's step of this warpgroup (it has one). The wgmma and its wait are in one
      // branch: issued under one condition and awaited under another, ptxas serialises
      // every wgmma of the kernel.
      const auto step = [&](int j) {
        const int i = W * j + warpgroup;
        const int local = j % T::kStages, ring_slot = warpgroup * T::kStages + local;
        barrier_wait(slot_barriers + ring_slot, barrier_phases >> local & 1u);  // its tile and scales landed
        barrier_phases ^= 1u << local;
        turn_wait();
        dots(acc, ring_slot);
        turn_pass();
        issue(i + W * (T::kStages - 1));  // into the slot of this warpgroup's previous step
        wgmma_wait_all();
        pin_accumulators(acc);
        epilogue(acc, step_first(i), 1.0f, pass);  // bf16: no key scale
      };
      const int steps = step_end - step_begin, whole_rounds = steps / W;
#pragma unroll 1
      for (int j = 0; j < whole_rounds; ++j) step(j);
      if (whole_rounds * W < steps) {  // the last round: the first steps % W warpgroups have a step
        if (whole_rounds * W + warpgroup < steps) {
          step(whole_rounds);
        } else {
          turn_wait();
          turn_pass();
        }
      }
      __syncthreads();  // every thread is done with the ring (and the group's inputs)
    }
  };
  // A segment's start: its keys, and its first steps' copies into the ring (free: the
  // previous segment, or the work partition's scratch, is done with it), issued before a
  // new group's inputs are loaded, so that the two loads overlap; score_segment then runs
  // its steps (kStages copies in flight for the split steps, kStages - 1 for whole ones).
  const auto start_segment = [&](int step_begin, int step_end) {
    segment_first = step_begin * T::kKeysPerStep;
    segment_end = step_end * T::kKeysPerStep;
    constexpr int kFirstCopies = T::kSplitStep ? T::kStages : T::kStages - 1;
#pragma unroll
    for (int j = 0; j < kFirstCopies; ++j) issue(T::kWarpgroups * j + warpgroup);  // each warpgroup its own
  };
  const auto score_segment = [&](unsigned pass, int step_begin, int step_end) {
    if constexpr (T::kWarpgroups > 1) {
      score_segment_turns(pass, step_begin, step_end);
    } else if constexpr (T::kSplitStep) {
      score_segment_split(pass, step_begin, step_end);
    } else {
      score_segment_whole(pass, step_begin, step_end);
    }
  };

  // 3. The block's masked steps first (their stores leave while the scored steps run):
  //    -inf for a pass's rows from its last scored step to max_context.
  walk_share<true>(args, steps_per_row, masked, group, valid, table_row, [&](unsigned pass, int pass_steps, int begin, int end) {
    const int key_end = min((pass_steps + end) * T::kKeysPerStep, max_context);
#pragma unroll
    for (int rr = 0; rr < T::kRows; ++rr) {
      if ((pass >> rr & 1u) == 0u) continue;
      for (int s = (pass_steps + begin) * T::kKeysPerStep + thread; s < key_end; s += T::kThreads) out(rr)[s] = -INFINITY;
    }
  });
  // 4. The block's scored steps; a group's inputs are loaded when the block enters it.
  if (T::kWarpgroups > 1 && warpgroup == T::kWarpgroups - 1) turn_pass();  // opens warpgroup 0's first turn
  int loaded_group = -1;
  walk_share<false>(args, steps_per_row, scored, group, valid, table_row, [&](unsigned pass, int, int begin, int end) {
    start_segment(begin, end);
    if (loaded_group != group.first) load_group_inputs(), loaded_group = group.first, group_out = out(0);
    score_segment(pass, begin, end);
  });
  if (T::kWarpgroups > 1 && warpgroup == 0) turn_wait();  // takes the last round's arrival
}

const char* format_name(StorageFormat f) {
  switch (f) {
    case StorageFormat::kNone: return "none";
    case StorageFormat::kFp32: return "fp32";
    case StorageFormat::kBf16: return "bf16";
    case StorageFormat::kFp8E4m3fn: return "fp8 e4m3fn";
    case StorageFormat::kFp4E2m1: return "fp4 e2m1";
    case StorageFormat::kFp4SimulatedBf16: return "fp4-simulated bf16";
  }
  return "unknown";
}

// Blocks of a launch: one wave, every block resident at once, as the work partition
// (kernel, part 0) gives each block the same number of steps whatever the rows' valid
// lengths, so no block slot idles while a longer group's blocks run. A block's fixed cost
// (the partition's scans, the query tile converted into shared memory, the first step's
// latency) is paid once, and again for each further group it enters (a share of ~100
// steps enters at most two groups of a 128K-key sequence). A batch of fewer than
// kMinStepsPerBlock steps a slot takes fewer blocks (the steps counted as one pass a group,
// scored or masked: the fewest a group can have). Which block scores a key does not change
// its score (each key's sum is formed by one quad in a fixed order), so this choice cannot
// change a result bit.
template <class T>
int blocks_for(const PagedLogitsArgs& args, int64_t resident) {
  const int64_t groups = (args.rows + T::kRows - 1) / T::kRows;
  const int64_t steps = groups * ((args.max_context + T::kKeysPerStep - 1) / T::kKeysPerStep);
  return static_cast<int>(std::clamp<int64_t>((steps + T::kMinStepsPerBlock - 1) / T::kMinStepsPerBlock, 1, resident));
}

// The driver's tensor-map encoder, looked up once through the runtime (no -lcuda).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled() {
  static const EncodeTiled encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found),
               "cuTensorMapEncodeTiled lookup");
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) throw_bad_input("paged_logits (fast): no cuTensorMapEncodeTiled");
    return reinterpret_cast<EncodeTiled>(fn);
  }();
  return encode;
}

// `base` as rows of row_bytes (128 or 256), boxes of box_rows rows x 128 bytes with the
// 128-byte swizzle (a 256-byte row takes a box a column block): the cache (a page being
// page_size value rows, then for fp8 page_size / 32 rows of scales; `rows` a bound, not the
// cache's size: the kernel reads valid pages only, as the cp.async path does; boxes of a
// step's 64 keys) or the e4m3 queries (rows x heads head rows; boxes of a group's 4 x 64).
CUtensorMap tile_map(const uint8_t* base, uint64_t rows, int row_bytes, uint32_t box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), rows};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {128, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult status = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(base), dims,
                                         strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) throw_bad_input("paged_logits (fast): cuTensorMapEncodeTiled failed");
  return map;
}

// Whether a four-row launch can copy its key tiles by the TMA: steps inside pages, 16-byte
// aligned rows (kPiece 16). One rule for the kernel's copies and the warpgroups' choice.
template <int kPiece>
bool key_tiles_by_tma(const PagedLogitsArgs& args) {
  return kPiece == 16 && args.page_size >= kStepKeys && args.cache != nullptr;
}

// `route`: null, or the run route_rows wrote (the instance runs only if it is kRows).
template <StorageFormat kKeyFormat, int kHeads, int kPiece, int kRows, int kWarpgroups = 1>
void launch_instance(const PagedLogitsArgs& args, const int* route = nullptr) {
  using T = WgmmaTraits<kKeyFormat, kHeads, kPiece, kRows, kWarpgroups>;
  const auto kernel = paged_logits_mma_kernel<T>;
  const int blocks = blocks_for<T>(args, resident_blocks(kernel, T::kThreads, T::kSmemBytes, "paged_logits_mma_kernel"));
  // The TMA path: four rows a block (kTma), steps inside pages, 16-byte aligned rows.
  const bool use_tma = T::kTma && key_tiles_by_tma<kPiece>(args);
  const CUtensorMap map = use_tma ? tile_map(args.cache, uint64_t{1} << 31, T::kRowBytes, 64) : CUtensorMap{};
  // The query tile by the TMA: e4m3 queries (128-byte head rows: an fp8 cache takes no
  // other, launch_paged_logits_fast) at a 16-byte aligned address; a group's kRows x 64 head
  // rows one box (four rows a block are 64-head kernels).
  static_assert(!T::kQueryTma || kHeads == 64, "the query box is kRows whole 64-head e4m3 rows");
  const bool use_query_tma = T::kQueryTma && use_tma && reinterpret_cast<uintptr_t>(args.q_values) % 16 == 0;
  const CUtensorMap query_map =
      use_query_tma ? tile_map(args.q_values, static_cast<uint64_t>(args.rows) * kHeads, 128, T::kQueryRows) : CUtensorMap{};
  if (kWarpgroups > 1 && !use_tma) throw_bad_input("paged_logits (fast): warpgroups in turn need the TMA path");
  kernel<<<blocks, T::kThreads, T::kSmemBytes>>>(args, map, use_tma, query_map, use_query_tma, route);
}

// Four rows a block: a bf16 cache on the TMA path (pages of at least a step, a 16-byte
// aligned cache) as two warpgroups in turn, one block an SM; else one warpgroup a block.
template <StorageFormat kKeyFormat, int kPiece>
void launch_four_rows(const PagedLogitsArgs& args, const int* route = nullptr) {
  if constexpr (kKeyFormat == StorageFormat::kBf16 && kPiece == 16) {
    if (key_tiles_by_tma<kPiece>(args)) return launch_instance<kKeyFormat, 64, kPiece, 4, 2>(args, route);
  }
  launch_instance<kKeyFormat, 64, kPiece, 4>(args, route);
}

// shared_row_run_of on the device: *route = 4 when at least half of the aligned groups of
// four rows lie in one sequence, else 1 (the same rule, so that a routed launch runs the
// instance a host hint from row_seq would pick). One block; rows <= 65,535 (the launcher's
// bound) make at most 16,383 groups.
constexpr int kRouteThreads = 1024;
__global__ void __launch_bounds__(kRouteThreads) route_rows(const int32_t* row_seq, int rows, int* route) {
  __shared__ int shared_groups;
  if (threadIdx.x == 0) shared_groups = 0;
  __syncthreads();
  const int groups = rows / 4;
  int shared = 0;
  for (int g = threadIdx.x; g < groups; g += kRouteThreads) {
    const int4 seq = make_int4(row_seq[4 * g], row_seq[4 * g + 1], row_seq[4 * g + 2], row_seq[4 * g + 3]);
    shared += seq.x == seq.y && seq.x == seq.z && seq.x == seq.w;
  }
  atomicAdd(&shared_groups, shared);
  __syncthreads();
  if (threadIdx.x == 0) *route = groups > 0 && 2 * shared_groups >= groups ? 4 : 1;
}

// The current device's route word (route_rows' output), allocated at its first use and
// kept for the process. One word a device suffices: every launch here goes to the legacy
// default stream, which orders the calls of all host threads, so a call's route_rows and
// the two launches that read its word are never interleaved with another call's.
int* route_word() {
  static std::mutex mutex;
  static std::vector<int*> words;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "paged_logits (fast): route");
  const std::lock_guard<std::mutex> lock(mutex);
  if (words.size() <= static_cast<size_t>(device)) words.resize(device + 1, nullptr);
  if (words[device] == nullptr) check_cuda(cudaMalloc(&words[device], sizeof(int)), "paged_logits (fast): route");
  return words[device];
}

// Four rows a block when the caller expects runs of at least four rows of one sequence
// (PagedLogitsArgs::shared_row_run), at 64 heads (fewer would pad the stacked query tile)
// and with 16-byte copies; any rows are scored right either way (a block of rows of
// several sequences takes a pass per sequence). With the hint unknown (0) the choice is
// made on the device, with no round trip to the host: route_rows writes the run into the
// device's route word and both instances are launched, the one not chosen leaving at once
// (~3 us of device time, against ~11 us of a copy back and its wait).
template <StorageFormat kKeyFormat, int kPiece>
void launch_format(const PagedLogitsArgs& args) {
  switch (args.num_heads) {
    case 16: return launch_instance<kKeyFormat, 16, kPiece, 1>(args);
    case 32: return launch_instance<kKeyFormat, 32, kPiece, 1>(args);
    case 64:
      if constexpr (kPiece == 16) {
        if (args.shared_row_run == 0 && args.rows >= 4) {
          int* const route = route_word();
          route_rows<<<1, kRouteThreads>>>(args.row_seq, args.rows, route);
          launch_four_rows<kKeyFormat, kPiece>(args, route);
          launch_instance<kKeyFormat, 64, kPiece, 1>(args, route);
          return;
        }
        if (args.shared_row_run >= 4) return launch_four_rows<kKeyFormat, kPiece>(args);
      }
      return launch_instance<kKeyFormat, 64, kPiece, 1>(args);
    default: break;
  }
  throw_bad_input("paged_logits (fast): num_heads must be 16, 32 or 64, not " + std::to_string(args.num_heads));
}

}  // namespace

void launch_paged_logits_fast(const PagedLogitsArgs& args) {
  const StorageFormat k = args.k_format, q = args.q_format;
  const bool fp8_cache = k == StorageFormat::kFp8E4m3fn;
  // fp4-simulated bf16 is stored as bf16 values (256 B/token, no scale): the same kernel.
  const bool bf16_cache = k == StorageFormat::kBf16 || k == StorageFormat::kFp4SimulatedBf16;
  if (!fp8_cache && !bf16_cache) {
    throw_bad_input(std::string("paged_logits (fast): the tensor-core kernel reads fp8 or bf16 caches, not ") +
                    format_name(k) + "; use the exact-order kernel");
  }
  if (fp8_cache && q != StorageFormat::kFp8E4m3fn) {
    throw_bad_input(std::string("paged_logits (fast): an fp8 cache takes fp8 queries, not ") + format_name(q) +
                    "; use the exact-order kernel");
  }
  const bool q_is_bf16 = q == StorageFormat::kBf16 || q == StorageFormat::kFp4SimulatedBf16;  // bf16 values as stored
  if (bf16_cache && q != StorageFormat::kFp8E4m3fn && !q_is_bf16) {
    throw_bad_input(std::string("paged_logits (fast): bf16 tensor cores multiply bf16 values, and ") + format_name(q) +
                    " queries are not all bf16 values (fp8 and bf16 queries are); use the exact-order kernel");
  }
  if (args.accum != ref::ScoreAccum::kFp32) throw_bad_input("paged_logits (fast): fp32 accumulation only");
  if (args.rows < 1 || args.rows > 65535) throw_bad_input("paged_logits (fast): rows must be in [1, 65535]");
  if (args.page_size < 1 || args.page_size > 256 || (args.page_size & (args.page_size - 1)) != 0) {
    throw_bad_input("paged_logits (fast): page size must be a power of two in [1, 256]");
  }
  if (args.max_context < 1 || args.max_context > (int64_t{1} << 30)) {
    throw_bad_input("paged_logits (fast): max_context out of range");
  }
  // The work partition counts steps of 64 keys in int: at most rows x steps a row of them
  // (a row is in one pass). Any batch whose logits fit in memory is far below 2^31.
  if (static_cast<int64_t>(args.rows) * ((args.max_context + kStepKeys - 1) / kStepKeys) >= (int64_t{1} << 31)) {
    throw_bad_input("paged_logits (fast): rows x max_context / 64 must be below 2^31");
  }
  // Keys are copied in 4- or 16-byte pieces and query values read in 4-byte words.
  if (reinterpret_cast<uintptr_t>(args.cache) % 4 != 0 || reinterpret_cast<uintptr_t>(args.q_values) % 4 != 0) {
    throw_bad_input("paged_logits (fast): the cache and the query values must be 4-byte aligned");
  }
  // Whole 16-byte pieces when every key row is 16-byte aligned (WgmmaTraits).
  const bool wide = reinterpret_cast<uintptr_t>(args.cache) % 16 == 0 && (!fp8_cache || args.page_size >= 4);
  if (fp8_cache) {
    wide ? launch_format<StorageFormat::kFp8E4m3fn, 16>(args) : launch_format<StorageFormat::kFp8E4m3fn, 4>(args);
  } else {
    wide ? launch_format<StorageFormat::kBf16, 16>(args) : launch_format<StorageFormat::kBf16, 4>(args);
  }
  check_cuda(cudaGetLastError(), "paged_logits_mma_kernel launch");
}

int shared_row_run_on_device(const int32_t* row_seq, int rows) {
  if (rows < 1 || rows > 65535) throw_bad_input("shared_row_run_on_device: rows must be in [1, 65535]");
  int* const route = route_word();  // the word a routed launch reads
  route_rows<<<1, kRouteThreads>>>(row_seq, rows, route);
  check_cuda(cudaGetLastError(), "route_rows launch");
  int run = 0;
  check_cuda(cudaMemcpy(&run, route, sizeof(int), cudaMemcpyDeviceToHost), "route_rows");
  return run;
}

}  // namespace dsaf::dev
