// The device top-K (device/topk/) against ref::select_topk, index for index and in order
// (TopKOrder::kByScore), or as the same positions ascending (kByIndex): random rows of
// every length class (1 .. 1,048,576, around K), rows built from bit patterns (few distinct
// values, a shared high part of 22..30 bits, +/-0.0, +/-inf, subnormals, all equal,
// bf16-rounded), rows whose candidates overflow the kernel's shared buffer, every K in
// {512, 1024, 2048}, every blocks_per_row and both orders; then determinism over 20 repeats
// and the bad-input rows (NaN, lengths). Padding after a row's valid length is NaN, so
// reading past it would fail the row. The reference takes doubles: fp32 -> double is exact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device/api.h"
#include "reference/error.h"
#include "reference/numeric/bit_cast.h"
#include "reference/numeric/minifloat.h"
#include "reference/topk.h"
#include "tests/device/gpu_test_support.h"

namespace dsaf::test {
namespace {

using ref::float_bits;
using ref::float_from_bits;

// K <= 1024 sorts the selection one composite a thread, K > 1024 two (select.cuh).
const std::vector<int> kKs = {100, 512, 1024, 1025, 2048};
const std::vector<int> kBlocksPerRow = {dev::kTopKAutoBlocksPerRow, 1, 2, 4, 8};
const std::vector<dev::TopKOrder> kOrders = {dev::TopKOrder::kByScore, dev::TopKOrder::kByIndex};

const char* order_name(dev::TopKOrder order) { return order == dev::TopKOrder::kByIndex ? "by index" : "by score"; }

enum class RowKind {
  kGaussian,         // N(0, 1) times a random power of two
  kBf16,             // Gaussian rounded to bf16: ties everywhere (the omlx case, docs/verification.md §4)
  kFewValues,        // 1..8 distinct values, any finite bit patterns
  kSharedHighBits,   // one random finite value's high 22, 26 or 30 bits, random low bits
  kSpecials,         // +/-0, +/-inf, subnormals, +/-FLT_MAX, +/-FLT_MIN, +/-1, any finite
  kSignedZeros,      // mostly +0.0 and -0.0 (equal scores), a few +/-1 and subnormals
  kAllEqual,         // one value
  kAnyBits,          // uniform over the non-NaN bit patterns
  kTiesAtThreshold,  // 1% above 1.0, 30% below, the rest exactly 1.0
};
const std::vector<RowKind> kAllKinds = {RowKind::kGaussian,     RowKind::kBf16,        RowKind::kFewValues,
                                        RowKind::kSharedHighBits, RowKind::kSpecials,  RowKind::kSignedZeros,
                                        RowKind::kAllEqual,     RowKind::kAnyBits,     RowKind::kTiesAtThreshold};

const char* kind_name(RowKind kind) {
  switch (kind) {
    case RowKind::kGaussian: return "gaussian";
    case RowKind::kBf16: return "bf16";
    case RowKind::kFewValues: return "few-values";
    case RowKind::kSharedHighBits: return "shared-high-bits";
    case RowKind::kSpecials: return "specials";
    case RowKind::kSignedZeros: return "signed-zeros";
    case RowKind::kAllEqual: return "all-equal";
    case RowKind::kAnyBits: return "any-bits";
    case RowKind::kTiesAtThreshold: return "ties-at-threshold";
  }
  return "?";
}

bool is_nan_bits(uint32_t bits) { return (bits & 0x7FFF'FFFFu) > 0x7F80'0000u; }

uint32_t any_non_nan_bits(std::mt19937& rng) {
  uint32_t bits;
  do {
    bits = static_cast<uint32_t>(rng());
  } while (is_nan_bits(bits));
  return bits;
}

uint32_t any_finite_bits(std::mt19937& rng) {
  uint32_t bits;
  do {
    bits = static_cast<uint32_t>(rng());
  } while ((bits & 0x7F80'0000u) == 0x7F80'0000u);
  return bits;
}

uint32_t special_bits(std::mt19937& rng) {
  static const uint32_t kTable[] = {0x0000'0000u, 0x8000'0000u, 0x7F80'0000u, 0xFF80'0000u,  // +/-0, +/-inf
                                    0x0000'0001u, 0x8000'0001u, 0x007F'FFFFu, 0x807F'FFFFu,  // subnormal ends
                                    0x7F7F'FFFFu, 0xFF7F'FFFFu, 0x0080'0000u, 0x8080'0000u,  // +/-max, +/-min normal
                                    0x3F80'0000u, 0xBF80'0000u};                               // +/-1
  const int pick = std::uniform_int_distribution<int>(0, 17)(rng);
  if (pick < 14) return kTable[pick];
  if (pick < 16) return (static_cast<uint32_t>(rng()) & 0x807F'FFFFu) | 1u;  // a random subnormal
  return any_finite_bits(rng);
}

std::vector<float> make_row(std::mt19937& rng, RowKind kind, int n) {
  std::vector<float> row(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  switch (kind) {
    case RowKind::kGaussian: {
      const float scale = std::ldexp(1.0f, std::uniform_int_distribution<int>(-20, 20)(rng));
      for (float& x : row) x = normal(rng) * scale;
      break;
    }
    case RowKind::kBf16:
      for (float& x : row) x = ref::round_bf16(normal(rng));
      break;
    case RowKind::kFewValues: {
      std::vector<float> values(std::uniform_int_distribution<int>(1, 8)(rng));
      for (float& v : values) v = float_from_bits(any_non_nan_bits(rng));
      std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
      for (float& x : row) x = values[pick(rng)];
      break;
    }
    case RowKind::kSharedHighBits: {
      const int low_bits = std::uniform_int_distribution<int>(0, 2)(rng) * 4 + 2;  // 2, 6 or 10
      // A normal base whose exponent survives any low bits: the row stays finite.
      uint32_t base;
      do {
        base = any_finite_bits(rng);
      } while ((base & 0x7F80'0000u) == 0 || (base & 0x7F80'0000u) == 0x7F00'0000u);
      base &= ~((1u << low_bits) - 1);
      for (float& x : row) x = float_from_bits(base | (static_cast<uint32_t>(rng()) & ((1u << low_bits) - 1)));
      break;
    }
    case RowKind::kSpecials:
      for (float& x : row) x = float_from_bits(special_bits(rng));
      break;
    case RowKind::kSignedZeros:
      for (float& x : row) {
        const int pick = std::uniform_int_distribution<int>(0, 19)(rng);
        if (pick < 18) {
          x = pick < 9 ? 0.0f : -0.0f;
        } else {
          x = pick == 18 ? (rng() & 1 ? 1.0f : -1.0f) : float_from_bits((rng() & 0x8000'0000u) | 1u);
        }
      }
      break;
    case RowKind::kAllEqual: {
      const float v = float_from_bits(rng() & 1 ? special_bits(rng) : any_non_nan_bits(rng));
      for (float& x : row) x = v;
      break;
    }
    case RowKind::kAnyBits:
      for (float& x : row) x = float_from_bits(any_non_nan_bits(rng));
      break;
    case RowKind::kTiesAtThreshold: {
      std::uniform_real_distribution<float> unit(0.0f, 1.0f);
      for (float& x : row) {
        const float p = unit(rng);
        x = p < 0.01f ? 1.0f + unit(rng) + 1e-3f : p < 0.31f ? -unit(rng) : 1.0f;
      }
      break;
    }
  }
  return row;
}

// A row length: tiny, around K, short or medium; or, for `long_rows` batches, half of the
// time long (up to kTopKMaxRowLength). Long rows come in small batches, since every row of
// a batch takes the stride of the longest.
int pick_length(std::mt19937& rng, int k, bool long_rows) {
  if (long_rows && rng() % 2 == 0) return std::uniform_int_distribution<int>(40001, dev::kTopKMaxRowLength)(rng);
  const int cls = std::uniform_int_distribution<int>(0, 99)(rng);
  if (cls < 10) return std::uniform_int_distribution<int>(1, 16)(rng);
  if (cls < 40) return std::max(1, k + std::uniform_int_distribution<int>(-3, 3)(rng));
  if (cls < 50) return 2 * k + std::uniform_int_distribution<int>(-2, 2)(rng);
  if (cls < 80) return std::uniform_int_distribution<int>(1, 6000)(rng);
  return std::uniform_int_distribution<int>(6001, 40000)(rng);
}

// Rows laid out as the kernel reads them: `offset` floats into the allocation (so row 0
// may start off a 16-byte boundary), `stride` >= every length (odd strides misalign rows),
// NaN after each row's valid part.
struct Batch {
  int k = 0;
  int64_t stride = 0;
  int offset = 0;
  std::vector<std::vector<float>> rows;
  std::vector<std::string> kinds;
};

struct Outcome {
  std::vector<int32_t> indices;
  std::vector<int32_t> status;
};

// Runs the kernel; with `async_status` through TopKArgs::row_status (no throw), else the
// synchronous launch that throws for bad rows; with `null_lengths` without valid_lengths
// (every row as long as the stride).
Outcome run_device(const Batch& b, int blocks_per_row, dev::TopKOrder order, bool async_status = false,
                   const std::vector<int32_t>* lengths_override = nullptr, bool null_lengths = false) {
  const int rows = static_cast<int>(b.rows.size());
  std::vector<float> host(b.offset + rows * b.stride + 1, std::numeric_limits<float>::quiet_NaN());
  std::vector<int32_t> lengths(rows);
  for (int r = 0; r < rows; ++r) {
    std::copy(b.rows[r].begin(), b.rows[r].end(), host.begin() + b.offset + r * b.stride);
    lengths[r] = static_cast<int32_t>(b.rows[r].size());
  }
  if (lengths_override != nullptr) lengths = *lengths_override;
  DeviceBuffer<float> d_scores(host);
  DeviceBuffer<int32_t> d_lengths(lengths);
  DeviceBuffer<int32_t> d_indices(std::vector<int32_t>(static_cast<size_t>(rows) * b.k, 0x5A5A5A5A));
  DeviceBuffer<int32_t> d_status(std::vector<int32_t>(rows, -7));
  dev::TopKArgs args;
  args.scores = d_scores.get() + b.offset;
  args.row_stride = b.stride;
  args.rows = rows;
  args.valid_lengths = null_lengths ? nullptr : d_lengths.get();
  args.k = b.k;
  args.indices = d_indices.get();
  args.row_status = async_status ? d_status.get() : nullptr;
  args.order = order;
  dev::launch_topk(args, blocks_per_row);
  Outcome out;
  out.indices = d_indices.download();
  out.status = d_status.download();
  return out;
}

std::string describe_score(const std::vector<float>& row, int32_t index) {
  if (index < 0 || index >= static_cast<int32_t>(row.size())) return "(none)";
  char text[64];
  std::snprintf(text, sizeof text, "%.9g [0x%08x]", row[index], float_bits(row[index]));
  return text;
}

// Compares row r of the device output with the reference (its selected positions sorted
// ascending for kByIndex, the -1 padding after them); returns "" or the first mismatch.
std::string compare_row(const Batch& b, int r, const int32_t* got, int blocks_per_row, dev::TopKOrder order) {
  const std::vector<float>& row = b.rows[r];
  const std::vector<double> scores(row.begin(), row.end());
  std::vector<int32_t> want = ref::select_topk(scores, static_cast<int64_t>(scores.size()), b.k);
  if (order == dev::TopKOrder::kByIndex) {
    std::sort(want.begin(), std::find(want.begin(), want.end(), -1));
  }
  for (int i = 0; i < b.k; ++i) {
    if (got[i] != want[i]) {
      return "row " + std::to_string(r) + " (" + b.kinds[r] + ", length " + std::to_string(row.size()) + ", K " +
             std::to_string(b.k) + ", " + order_name(order) + ", blocks/row " + std::to_string(blocks_per_row) +
             ", stride " +
             std::to_string(b.stride) + ", offset " + std::to_string(b.offset) + "): position " + std::to_string(i) +
             " is index " + std::to_string(got[i]) + " = " + describe_score(row, got[i]) + ", the reference has " +
             std::to_string(want[i]) + " = " + describe_score(row, want[i]);
    }
  }
  return "";
}

// Runs the batch and checks every row; returns the number of rows checked.
int check_batch(const Batch& b, int blocks_per_row, dev::TopKOrder order) {
  const Outcome out = run_device(b, blocks_per_row, order);
  int failures = 0;
  for (size_t r = 0; r < b.rows.size(); ++r) {
    const std::string diff =
        compare_row(b, static_cast<int>(r), out.indices.data() + r * b.k, blocks_per_row, order);
    if (!diff.empty()) {
      ADD_FAILURE() << diff;
      if (++failures == 5) break;
    }
  }
  return static_cast<int>(b.rows.size());
}

Batch make_batch(std::mt19937& rng, int k) {
  Batch b;
  b.k = k;
  b.offset = std::uniform_int_distribution<int>(0, 3)(rng);
  return b;
}

void add_row(Batch& b, std::vector<float> row, RowKind kind) {
  b.stride = std::max<int64_t>(b.stride, static_cast<int64_t>(row.size()));
  b.rows.push_back(std::move(row));
  b.kinds.push_back(kind_name(kind));
}

// Odd padding after the longest row, so most rows start off a 16-byte boundary.
void finish_stride(std::mt19937& rng, Batch& b) { b.stride += std::uniform_int_distribution<int>(0, 3)(rng); }

TEST(TopKGpu, MatchesReferenceOnRandomRows) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(2048);
  const int kMinRows = 12000;
  int rows = 0, batches = 0;
  while (rows < kMinRows && !HasFailure()) {
    const dev::TopKOrder order = kOrders[batches % kOrders.size()];
    const int k = kKs[(batches / kOrders.size()) % kKs.size()];
    const int blocks_per_row = kBlocksPerRow[(batches / kOrders.size() / kKs.size()) % kBlocksPerRow.size()];
    const bool long_rows = batches % 8 == 7;
    Batch b = make_batch(rng, k);
    const int num_rows = std::uniform_int_distribution<int>(1, long_rows ? 8 : 96)(rng);
    for (int r = 0; r < num_rows; ++r) {
      const RowKind kind = kAllKinds[std::uniform_int_distribution<size_t>(0, kAllKinds.size() - 1)(rng)];
      add_row(b, make_row(rng, kind, pick_length(rng, k, long_rows)), kind);
    }
    finish_stride(rng, b);
    rows += check_batch(b, blocks_per_row, order);
    ++batches;
  }
  RecordProperty("rows", std::to_string(rows));
  std::printf("[ top-K ] %d random rows in %d batches, index-exact\n", rows, batches);
}

TEST(TopKGpu, MatchesReferenceAroundKForEveryKindAndBlocksPerRow) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(7);
  int rows = 0;
  for (int k : kKs) {
    for (int blocks_per_row : kBlocksPerRow) {
      Batch b = make_batch(rng, k);
      for (RowKind kind : kAllKinds) {
        for (int n : {1, 2, 3, 4, 5, 7, k - 1, k, k + 1, 2 * k + 3}) add_row(b, make_row(rng, kind, n), kind);
      }
      finish_stride(rng, b);
      for (dev::TopKOrder order : kOrders) rows += check_batch(b, blocks_per_row, order);
    }
  }
  std::printf("[ top-K ] %d rows around K, both orders, index-exact\n", rows);
}

// Rows whose candidate sets exceed the 16,384-entry shared buffer of a block: the kernel
// must read the row again (and select among ties by index) instead of dropping elements.
TEST(TopKGpu, MatchesReferenceWhenCandidatesOverflowTheBuffer) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(16384);
  const std::vector<RowKind> kinds = {RowKind::kAllEqual, RowKind::kFewValues, RowKind::kSharedHighBits,
                                      RowKind::kSignedZeros, RowKind::kBf16, RowKind::kTiesAtThreshold};
  int rows = 0;
  for (int k : kKs) {
    for (int blocks_per_row : kBlocksPerRow) {
      Batch b = make_batch(rng, k);
      for (RowKind kind : kinds) {
        for (int n : {16385, 65536, 131072, dev::kTopKMaxRowLength}) add_row(b, make_row(rng, kind, n), kind);
      }
      // All values in one 2^-2-wide bin of the first digit (exponent 0, top mantissa bits 00):
      // every score is a candidate after the first pass.
      std::vector<float> narrow(200000);
      for (float& x : narrow) x = float_from_bits(0x3F80'0000u | (static_cast<uint32_t>(rng()) & 0x001F'FFFFu));
      add_row(b, std::move(narrow), RowKind::kSharedHighBits);
      finish_stride(rng, b);
      for (dev::TopKOrder order : kOrders) rows += check_batch(b, blocks_per_row, order);
    }
  }
  std::printf("[ top-K ] %d long rows with overflowing candidate sets, both orders, index-exact\n", rows);
}

// The grid path (kTopKGrid + G blocks a row: select.cuh): batches that fit 132 SMs at one
// block each (H100 SXM, H200), from one 1M-score row over 128 blocks to 64 short rows at
// one block a row and more blocks than a short row needs; one row of each batch at its
// longest (slices at the blocks' capacity), the rest of random lengths below it; every
// kind of row, two K each, both orders. A case whose rows x G exceed this GPU's SMs (the
// kernel holds one block an SM) is left out and named.
TEST(TopKGpu, GridPathMatchesReference) {
  DSAF_REQUIRE_GPU();
  struct Case {
    int rows, longest, blocks;
  };
  const int max = dev::kTopKMaxRowLength;
  const std::vector<Case> cases = {{1, max, 128}, {1, max, 32},      {4, max - 3, 32}, {32, 131072 - 3, 4},
                                   {3, 100000, 4}, {16, 65536 - 3, 2}, {64, 32768 - 3, 1}, {2, 50000, 64},
                                   {8, 5000, 16}};
  std::mt19937 rng(32768);
  const int sms = dev::compute_peaks().sms;
  int rows = 0, launches = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    if (cases[c].rows * cases[c].blocks > sms) {
      std::printf("[ top-K ] grid case %d x %d blocks left out: %d SMs\n", cases[c].rows, cases[c].blocks, sms);
      continue;
    }
    for (int k_pick = 0; k_pick < 2; ++k_pick) {
      const int k = kKs[(2 * c + k_pick) % kKs.size()];
      Batch b = make_batch(rng, k);
      for (int r = 0; r < cases[c].rows; ++r) {
        const RowKind kind = kAllKinds[(c + r + k_pick) % kAllKinds.size()];
        const int n = r == 0 ? cases[c].longest : std::uniform_int_distribution<int>(1, cases[c].longest)(rng);
        add_row(b, make_row(rng, kind, n), kind);
      }
      for (dev::TopKOrder order : kOrders) {
        rows += check_batch(b, dev::kTopKGrid + cases[c].blocks, order);
        ++launches;
      }
    }
  }
  std::printf("[ top-K ] grid path: %d rows in %d launches, index-exact\n", rows, launches);
}

// The grid path when one block's slice holds the row's whole selection: K - 48 scores in
// high field-0 bins (selected by pass 1) and `crowd` distinct scores in [2, 2.5), one
// field-0 bin, of which the selection needs 48 (in play after pass 1), over small
// Gaussian scores elsewhere. With crowd 3,000 and K 2,048 the block's pass-1 candidates
// (selected plus in play, ~5,000) exceed its 4,096-slot buffer while the in-play ones fit;
// with K 1,025 both fit; with crowd 6,000 neither fits. Each slice of the four takes the
// crowd in turn (row r: slice r % 4), both orders, G = 4.
TEST(TopKGpu, GridPathWhenOneSliceHoldsTheSelectionAndItsBin) {
  DSAF_REQUIRE_GPU();
  // 3 under 4 slices' 131,072 scores: finish_stride pads the stride by up to 3.
  constexpr int kLength = 131072 - 3, kSlices = 4, kNeeded = 48;
  std::mt19937 rng(4096);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int rows = 0;
  for (const int crowd : {3000, 6000}) {
    for (const int k : {2048, 1025}) {
      Batch b = make_batch(rng, k);
      for (int r = 0; r < kSlices; ++r) {
        std::vector<float> row(kLength);
        for (float& x : row) x = normal(rng) * 0.01f;
        // Distinct positions inside slice r (away from its ends, which the alignment moves).
        const int slice_begin = r * (kLength / kSlices) + 64;
        std::vector<int> positions(kLength / kSlices - 128);
        std::iota(positions.begin(), positions.end(), slice_begin);
        std::shuffle(positions.begin(), positions.end(), rng);
        int next = 0;
        for (int i = 0; i < k - kNeeded; ++i) row[positions[next++]] = 1000.0f + static_cast<float>(i);
        // Distinct values in [2, 2.5): 2 + j * 2^-22 for j = 97 i < 2^21.
        for (int i = 0; i < crowd; ++i) row[positions[next++]] = float_from_bits(0x4000'0000u + 97u * i);
        add_row(b, std::move(row), RowKind::kSharedHighBits);
      }
      finish_stride(rng, b);
      for (dev::TopKOrder order : kOrders) {
        rows += check_batch(b, dev::kTopKGrid + kSlices, order);
        rows += check_batch(b, dev::kTopKAutoBlocksPerRow, order);
      }
    }
  }
  std::printf("[ top-K ] %d rows with the selection in one slice, index-exact\n", rows);
}

// Edges on both paths: K = 1 and 7, empty rows and rows of 1-2 scores beside long ones, a
// NaN as the first or the last score of a row (block 0's head, the last block's tail), and
// rows without valid_lengths (every row the stride long).
TEST(TopKGpu, TinyKEmptyRowsEdgeNaNsAndNoLengths) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(1);
  int rows = 0;
  for (int k : {1, 7}) {
    // Short rows (the grid path at one block a row fits them), then rows past 65,536.
    for (const int longest : {30000, 70001}) {
      const std::vector<int> widths = longest <= 32768 ? std::vector<int>{1, 2, dev::kTopKGrid + 1, dev::kTopKGrid + 4}
                                                       : std::vector<int>{2, 8, dev::kTopKGrid + 4, dev::kTopKGrid + 16};
      Batch b = make_batch(rng, k);
      for (int n : {0, 1, 2, 5, 1000, longest}) {
        const RowKind kind = n % 2 == 0 ? RowKind::kBf16 : RowKind::kGaussian;
        add_row(b, make_row(rng, kind, n), kind);
      }
      finish_stride(rng, b);
      for (int blocks_per_row : widths) {
        for (dev::TopKOrder order : kOrders) rows += check_batch(b, blocks_per_row, order);
      }
      // A NaN first in one row and last in another: both rows kNaN and all -1, the others exact.
      Batch nan_rows = b;
      nan_rows.rows[4][0] = std::numeric_limits<float>::quiet_NaN();
      nan_rows.rows[5].back() = std::numeric_limits<float>::quiet_NaN();
      for (int blocks_per_row : widths) {
        const Outcome out = run_device(nan_rows, blocks_per_row, dev::TopKOrder::kByIndex, /*async_status=*/true);
        for (int r = 0; r < static_cast<int>(nan_rows.rows.size()); ++r) {
          const int32_t* got = out.indices.data() + static_cast<size_t>(r) * k;
          if (r >= 4) {
            EXPECT_EQ(out.status[r], static_cast<int32_t>(dev::TopKRowStatus::kNaN)) << r << ", " << blocks_per_row;
            EXPECT_EQ(std::vector<int32_t>(got, got + k), std::vector<int32_t>(k, -1)) << r << ", " << blocks_per_row;
          } else {
            EXPECT_EQ(out.status[r], static_cast<int32_t>(dev::TopKRowStatus::kOk)) << r << ", " << blocks_per_row;
            EXPECT_EQ(compare_row(nan_rows, r, got, blocks_per_row, dev::TopKOrder::kByIndex), "");
          }
        }
      }
      // Without valid_lengths: rows of exactly the stride.
      Batch full = make_batch(rng, k);
      for (int r = 0; r < 3; ++r) add_row(full, make_row(rng, RowKind::kGaussian, longest), RowKind::kGaussian);
      for (int blocks_per_row : widths) {
        for (dev::TopKOrder order : kOrders) {
          const Outcome out = run_device(full, blocks_per_row, order, false, nullptr, /*null_lengths=*/true);
          for (int r = 0; r < 3; ++r) {
            EXPECT_EQ(compare_row(full, r, out.indices.data() + static_cast<size_t>(r) * k, blocks_per_row, order), "");
          }
          rows += 3;
        }
      }
    }
  }
  std::printf("[ top-K ] %d rows with K 1 / 7, empty rows, edge NaNs, no valid lengths, index-exact\n", rows);
}

TEST(TopKGpu, IsBitwiseDeterministicOver20Runs) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(20);
  const int rows = 32, n = 131072, k = 2048;
  Batch b = make_batch(rng, k);
  for (int r = 0; r < rows; ++r) {
    const RowKind kind = r % 2 == 0 ? RowKind::kGaussian : RowKind::kBf16;
    add_row(b, make_row(rng, kind, n), kind);
  }
  for (dev::TopKOrder order : kOrders) {
    const Outcome first = run_device(b, dev::kTopKAutoBlocksPerRow, order);
    for (int r = 0; r < rows; ++r) {
      ASSERT_EQ(compare_row(b, r, first.indices.data() + static_cast<size_t>(r) * k, 0, order), "");
    }
    // Repeats 1-4 take the cluster widths of kBlocksPerRow, the next one the grid path at 4
    // blocks a row (where the GPU holds the 128 blocks), the rest the automatic choice.
    const bool grid_fits = rows * 4 <= dev::compute_peaks().sms;
    const int cluster_widths = static_cast<int>(kBlocksPerRow.size());
    for (int repeat = 1; repeat < 20; ++repeat) {
      const int blocks_per_row = repeat < cluster_widths                ? kBlocksPerRow[repeat]
                                 : repeat == cluster_widths && grid_fits ? dev::kTopKGrid + 4
                                                                        : dev::kTopKAutoBlocksPerRow;
      const Outcome again = run_device(b, blocks_per_row, order);
      ASSERT_EQ(again.indices, first.indices)
          << order_name(order) << ", repeat " << repeat << ", blocks per row " << blocks_per_row;
    }
  }
}

TEST(TopKGpu, NanRowIsBadInputAndNamed) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(99);
  for (size_t case_index = 0; case_index < kBlocksPerRow.size() * kOrders.size(); ++case_index) {
    const int blocks_per_row = kBlocksPerRow[case_index / kOrders.size()];
    const dev::TopKOrder order = kOrders[case_index % kOrders.size()];
    for (uint32_t nan_bits : {0x7FC0'0000u, 0xFFC0'0000u, 0x7F80'0001u, 0xFFFF'FFFFu}) {
      Batch b = make_batch(rng, 512);
      for (int r = 0; r < 8; ++r) {
        add_row(b, make_row(rng, RowKind::kGaussian, r == 5 ? 70000 : 3000), RowKind::kGaussian);
      }
      b.rows[5][std::uniform_int_distribution<size_t>(0, b.rows[5].size() - 1)(rng)] = float_from_bits(nan_bits);
      b.kinds[5] = "gaussian with a NaN";
      finish_stride(rng, b);
      try {
        run_device(b, blocks_per_row, order);
        ADD_FAILURE() << "no error for a NaN score";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
        EXPECT_NE(std::string(e.what()).find("row 5"), std::string::npos) << e.what();
      }
      // Through row_status: row 5 flagged and all -1, the other rows still exact.
      const Outcome out = run_device(b, blocks_per_row, order, /*async_status=*/true);
      for (int r = 0; r < 8; ++r) {
        const int32_t* got = out.indices.data() + static_cast<size_t>(r) * b.k;
        if (r == 5) {
          EXPECT_EQ(out.status[r], static_cast<int32_t>(dev::TopKRowStatus::kNaN));
          EXPECT_EQ(std::vector<int32_t>(got, got + b.k), std::vector<int32_t>(b.k, -1));
        } else {
          EXPECT_EQ(out.status[r], static_cast<int32_t>(dev::TopKRowStatus::kOk));
          EXPECT_EQ(compare_row(b, r, got, blocks_per_row, order), "");
        }
      }
    }
  }
}

TEST(TopKGpu, LengthOutsideTheRowIsBadInputAndNamed) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(3);
  Batch b = make_batch(rng, 1024);
  for (int r = 0; r < 4; ++r) add_row(b, make_row(rng, RowKind::kGaussian, 5000), RowKind::kGaussian);
  for (int blocks_per_row : {dev::kTopKAutoBlocksPerRow, dev::kTopKGrid + 2}) {
    for (int32_t bad : {-1, static_cast<int32_t>(b.stride) + 1}) {
      std::vector<int32_t> lengths(4, 5000);
      lengths[2] = bad;
      try {
        run_device(b, blocks_per_row, dev::TopKOrder::kByScore, false, &lengths);
        ADD_FAILURE() << "no error for length " << bad << ", blocks per row " << blocks_per_row;
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
        EXPECT_NE(std::string(e.what()).find("row 2"), std::string::npos) << e.what();
      }
      const Outcome out = run_device(b, blocks_per_row, dev::TopKOrder::kByIndex, true, &lengths);
      EXPECT_EQ(out.status[2], static_cast<int32_t>(dev::TopKRowStatus::kBadLength));
      EXPECT_EQ(out.status[3], static_cast<int32_t>(dev::TopKRowStatus::kOk));
      EXPECT_EQ(compare_row(b, 3, out.indices.data() + 3 * b.k, blocks_per_row, dev::TopKOrder::kByIndex), "");
    }
  }
}

// The grid path's records outlive a launch (select.cuh: for G = 8, GridRowZeroed, two sets
// a row, the next one named on the device; for G = 2 and 4 the tagged exchange's slots,
// whose words must never match a later launch's tags, and its epoch). A row's records must
// come clean to its next launch whatever happened between: launches of fewer rows (the row
// absent, its blocks' slots another row's), a launch in which the row's length was refused
// (its blocks leave before the first barrier), a launch in which the row had a NaN (its set
// keeps the NaN flag), other blocks a row (the barrier targets, the zeroing slices and the
// exchange change with G) and the other order. Each launch is checked against the
// reference, row by row.
TEST(TopKGpu, GridRecordsComeCleanAcrossLaunchesOfOtherShapes) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(29);
  Batch four = make_batch(rng, 512), two = make_batch(rng, 512);
  for (int r = 0; r < 4; ++r) {
    const RowKind kind = kAllKinds[r % kAllKinds.size()];
    add_row(four, make_row(rng, kind, 60000 + r), kind);
  }
  for (int r = 0; r < 2; ++r) add_row(two, make_row(rng, RowKind::kGaussian, 30000 + r), RowKind::kGaussian);
  Batch nan_row = four;
  nan_row.rows[1][12345] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<int32_t> refused = {60000, 60001, -1, 60003};
  const int blocks[] = {2, 4, 8, 2, 8, 4};  // every change of G between the launches of a row
  for (int round = 0; round < 6; ++round) {
    const int grid = dev::kTopKGrid + blocks[round];
    const std::string where = "round " + std::to_string(round) + ", " + std::to_string(blocks[round]) + " blocks a row";
    for (dev::TopKOrder order : kOrders) {
      check_batch(four, grid, order);
      check_batch(two, grid, order);  // rows 2 and 3 sit out
      const Outcome out = run_device(four, grid, order, true, &refused);  // row 2 refused
      EXPECT_EQ(out.status[2], static_cast<int32_t>(dev::TopKRowStatus::kBadLength)) << where;
      for (int r : {0, 1, 3}) {
        EXPECT_EQ(compare_row(four, r, out.indices.data() + r * four.k, grid, order), "") << where;
      }
      const Outcome nan = run_device(nan_row, grid, order, true);  // row 1's set keeps its NaN flag
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(nan.status[r], static_cast<int32_t>(r == 1 ? dev::TopKRowStatus::kNaN : dev::TopKRowStatus::kOk))
            << where << ", row " << r;
        const int32_t* got = nan.indices.data() + r * four.k;
        if (r == 1) {
          EXPECT_EQ(std::count(got, got + four.k, -1), four.k) << where << ": a NaN row's indices are all -1";
        } else {
          EXPECT_EQ(compare_row(four, r, got, grid, order), "") << where;
        }
      }
    }
  }
}

// Argument checks happen before any CUDA call: this runs without a GPU too.
TEST(TopKGpu, RejectsUnsupportedArguments) {
  const auto expect_bad_input = [](dev::TopKArgs args, int blocks_per_row, const char* what) {
    try {
      dev::launch_topk(args, blocks_per_row);
      ADD_FAILURE() << "accepted " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << what << ": " << e.what();
    }
  };
  dev::TopKArgs ok;
  ok.rows = 1;
  ok.row_stride = 4096;
  ok.k = 512;
  dev::TopKArgs a = ok;
  a.k = 0;
  expect_bad_input(a, 0, "K = 0");
  a.k = dev::kTopKMaxK + 1;
  expect_bad_input(a, 0, "K = 2049");
  expect_bad_input(ok, 3, "3 blocks per row");
  a = ok;
  a.rows = -1;
  expect_bad_input(a, 0, "negative rows");
  a = ok;
  a.row_stride = dev::kTopKMaxRowLength + 1;
  expect_bad_input(a, 0, "rows longer than 2^18 without valid lengths");
  expect_bad_input(ok, 0, "null pointers");
  a = ok;
  a.order = static_cast<dev::TopKOrder>(2);
  expect_bad_input(a, 0, "order 2");
  expect_bad_input(ok, dev::kTopKGrid + 3, "3 grid blocks a row");
  expect_bad_input(ok, dev::kTopKGrid + 256, "256 grid blocks a row");
}

}  // namespace
}  // namespace dsaf::test
