// File: topk.cu — launch_topk (api.h): the blocks per row (a cluster, or the grid path),
// the launch and the row statuses of the radix select in select.cuh (its header has the
// algorithm and why it is exact and deterministic).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "device/api.h"
#include "device/launch.h"
#include "device/topk/select.cuh"

namespace dsaf::dev {
namespace {

using namespace topk_select;

// The grid path (select.cuh) for G blocks a row: the fewest G whose slices fit a block's
// keys, or 0 when none of 1, 2, ..., kGridMaxBlocksPerRow does.
int grid_min_blocks(int64_t row_stride) {
  for (int g = 1; g <= kGridMaxBlocksPerRow; g *= 2) {
    if (row_stride <= int64_t{kGridSliceScores} * g) return g;
  }
  return 0;
}

// The grid kernel for G blocks a row: the tagged exchange's for G = 2 and 4
// (kTaggedMaxBlocks), the row barriers' otherwise.
static_assert(kTaggedMaxBlocks == 4, "grid_kernel instantiates the tagged exchange for G = 2 and 4");
using GridKernel = void (*)(TopKArgs, int, GridRecordsArgs, int32_t*);
GridKernel grid_kernel(int blocks_per_row) {
  return blocks_per_row == 2 ? topk_grid_kernel<2> : blocks_per_row == 4 ? topk_grid_kernel<4> : topk_grid_kernel<0>;
}

int grid_resident_blocks() {  // every variant: the launcher may take any of them
  int blocks = resident_blocks(grid_kernel(1), kThreads, sizeof(GridSmem), "topk_grid_kernel");
  for (int g = 2; g <= kTaggedMaxBlocks; g *= 2) {
    blocks = std::min(blocks, resident_blocks(grid_kernel(g), kThreads, sizeof(GridSmem), "topk_grid_kernel"));
  }
  return blocks;
}

// Blocks per row when the caller leaves it open. Rows of 65,536 scores or more whose grid
// path fits at once (rows x G blocks resident): the grid path with the most blocks a row
// that fit, up to 128, so that every SM works on the rows (clusters of 2 leave half the
// SMs idle at 32 rows, one cluster of 8 all but 8 at one row). Otherwise a cluster: two
// while the grid stays one wave (rows x 2 <= SMs): a pass's time is its slice's per-score
// work on one SM, which a second block halves for the price of one histogram exchange a
// pass. Four and eight only while the grid fills at most half of the SMs: every block
// reads every peer's histogram over DSMEM, so the exchange grows with the cluster while
// the slices shrink, and clusters of 4 or 8 leave SMs of each processing cluster idle
// (docs/key-path-speed.md has the widths compared). Every block keeps at least
// kMinScoresPerBlock scores.
int auto_blocks_per_row(const TopKArgs& args) {
  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const int64_t rows = args.rows;
  if (const int g_min = grid_min_blocks(args.row_stride); g_min > 0 && args.row_stride >= 65536) {
    const int64_t resident = grid_resident_blocks();
    if (rows * g_min <= resident) {
      int g = g_min;
      while (g < kGridMaxBlocksPerRow && rows * g * 2 <= resident) g *= 2;
      return kTopKGrid + g;
    }
  }
  if (rows * 2 > sms || args.row_stride < kMinScoresPerBlock * 2) return 1;
  int blocks = 2;
  while (blocks < 8 && rows * blocks * 4 <= sms && args.row_stride >= kMinScoresPerBlock * blocks * 2) blocks *= 2;
  return blocks;
}

template <int kCluster>
void launch_cluster(const TopKArgs& args, int32_t* status) {
  const auto kernel = topk_kernel<kCluster>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Smem)),
             "topk_kernel shared memory");
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(args.rows) * kCluster);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = sizeof(Smem);
  config.stream = nullptr;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = kCluster;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = kCluster > 1 ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&config, kernel, args, status), "topk_kernel launch");
}

// The grid path's per-row records on the current device, for as many rows as its blocks
// can be (rows x G <= the resident blocks): allocated at a device's first grid launch, the
// two GridRowZeroed sets of each row and the word naming the next one zeroed then, kept for
// the process. Every launch leaves zeroed the set each of its rows takes next (select.cuh)
// and launches on stream 0, the legacy default stream (this library is not
// built with per-thread default streams), run one after another, so they share these
// records; two grid launches running at once on them would corrupt their barriers. Like
// resident_blocks' kept attribute (launch.h), the records do not survive cudaDeviceReset.
// The tagged exchange's slots (one a resident block, zeroed) and its epoch (1) likewise:
// allocated with the rest, each launch leaving the epoch at the next launch's.
using GridRecords = GridRecordsArgs;

GridRecords grid_records() {
  static std::mutex mutex;
  static std::map<int, GridRecords> by_device;  // under mutex
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mutex);
  GridRecords& records = by_device[device];
  if (records.zeroed == nullptr) {
    const size_t rows = static_cast<size_t>(grid_resident_blocks());
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&records.rows), sizeof(GridRow) * rows), "top-K grid records");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&records.zeroed), sizeof(GridRowZeroed) * 2 * rows),
               "top-K grid records");
    check_cuda(cudaMemset(records.zeroed, 0, sizeof(GridRowZeroed) * 2 * rows), "top-K grid records");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&records.next_set), sizeof(uint32_t) * rows), "top-K grid records");
    check_cuda(cudaMemset(records.next_set, 0, sizeof(uint32_t) * rows), "top-K grid records");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&records.slots), sizeof(TaggedSlot) * rows), "top-K grid records");
    check_cuda(cudaMemset(records.slots, 0, sizeof(TaggedSlot) * rows), "top-K grid records");
    records.slot_count = static_cast<int>(rows);
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&records.epoch), sizeof(TaggedEpoch)), "top-K grid records");
    const TaggedEpoch first{1, 0};
    check_cuda(cudaMemcpy(records.epoch, &first, sizeof(first), cudaMemcpyHostToDevice), "top-K grid records");
  }
  return records;
}

// G blocks a row in one cooperative grid, every block resident at once; for G = 2 or 4 the
// kernel whose blocks exchange tagged words (select.cuh).
void launch_grid(const TopKArgs& args, int blocks_per_row, int32_t* status) {
  const int min_blocks = grid_min_blocks(args.row_stride);
  if (min_blocks == 0 || blocks_per_row < min_blocks) {
    throw_bad_input("top-K: " + std::to_string(blocks_per_row) + " grid blocks a row hold at most " +
                    std::to_string(int64_t{kGridSliceScores} * blocks_per_row) + " scores a row; the row stride is " +
                    std::to_string(args.row_stride));
  }
  const int resident = grid_resident_blocks();
  const int64_t blocks = int64_t{args.rows} * blocks_per_row;
  if (blocks > resident) {
    throw_bad_input("top-K: " + std::to_string(args.rows) + " rows x " + std::to_string(blocks_per_row) +
                    " grid blocks exceed the " + std::to_string(resident) + " blocks this GPU holds at once");
  }
  GridRecords records = grid_records();
  int per_row = blocks_per_row;
  TopKArgs kernel_args = args;
  void* params[] = {&kernel_args, &per_row, &records, &status};
  check_cuda(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(grid_kernel(blocks_per_row)),
                                         dim3(static_cast<unsigned>(blocks)), dim3(kThreads), params,
                                         sizeof(GridSmem), nullptr),
             "topk_grid_kernel launch");
}

// The synchronous launch's row statuses: page-locked host memory mapped into the device's
// address space, allocated at a device's first synchronous call (and grown for more rows),
// kept for the process. The kernel writes each row's status straight into it, so the
// call waits for the kernel alone (a stream synchronisation) and reads the statuses where
// they are: no copy queued behind the kernel, no allocation or free around it. The
// buffer is the caller's for the whole call: `lock` is held from the launch until the
// statuses are read, so synchronous calls from several threads take turns.
struct SyncStatus {
  std::unique_lock<std::mutex> lock;
  int32_t* host = nullptr;    // [rows], valid while `lock` is held
  int32_t* device = nullptr;  // the same memory, as the kernel addresses it
};

SyncStatus sync_status(int rows) {
  struct Kept {
    int32_t* host = nullptr;
    int32_t* device = nullptr;
    int capacity = 0;
  };
  static std::mutex mutex;
  static std::map<int, Kept> by_device;  // under mutex
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  SyncStatus status{std::unique_lock<std::mutex>(mutex)};
  Kept& kept = by_device[device];
  if (kept.capacity < rows) {
    if (kept.host != nullptr) check_cuda(cudaFreeHost(kept.host), "top-K status cudaFreeHost");
    kept = Kept{};
    void* p = nullptr;
    // Portable: a buffer kept per device is still a host allocation every context can map.
    check_cuda(cudaHostAlloc(&p, sizeof(int32_t) * static_cast<size_t>(rows),
                             cudaHostAllocMapped | cudaHostAllocPortable),
               "top-K status cudaHostAlloc");
    kept.host = static_cast<int32_t*>(p);
    void* d = nullptr;
    check_cuda(cudaHostGetDevicePointer(&d, p, 0), "top-K status cudaHostGetDevicePointer");
    kept.device = static_cast<int32_t*>(d);
    kept.capacity = rows;
  }
  status.host = kept.host;
  status.device = kept.device;
  return status;
}

}  // namespace

void launch_topk(const TopKArgs& args, int blocks_per_row) {
  if (args.k < 1 || args.k > kTopKMaxK) {
    throw_bad_input("top-K: K must be in [1, " + std::to_string(kTopKMaxK) + "], got " + std::to_string(args.k));
  }
  if (args.order != TopKOrder::kByScore && args.order != TopKOrder::kByIndex) {
    throw_bad_input("top-K: order must be by score (0) or by index (1), got " +
                    std::to_string(static_cast<int32_t>(args.order)));
  }
  if (args.rows < 0) throw_bad_input("top-K: negative row count");
  if (args.row_stride < 0) throw_bad_input("top-K: negative row stride");
  if (args.valid_lengths == nullptr && args.row_stride > kTopKMaxRowLength) {
    throw_bad_input("top-K: rows of " + std::to_string(args.row_stride) + " scores; at most " +
                    std::to_string(kTopKMaxRowLength) + " are supported");
  }
  const int grid_blocks = blocks_per_row - kTopKGrid;
  const bool grid = grid_blocks >= 1 && grid_blocks <= kGridMaxBlocksPerRow && (grid_blocks & (grid_blocks - 1)) == 0;
  if (blocks_per_row != kTopKAutoBlocksPerRow && blocks_per_row != 1 && blocks_per_row != 2 &&
      blocks_per_row != 4 && blocks_per_row != 8 && !grid) {
    throw_bad_input("top-K: blocks per row must be 1, 2, 4 or 8, kTopKGrid + a power of two up to 128, or 0 for "
                    "automatic");
  }
  if (args.rows == 0) return;
  if (args.scores == nullptr || args.indices == nullptr) throw_bad_input("top-K: null scores or indices");
  if (static_cast<int64_t>(args.rows) * 8 > int64_t{0x7FFF'FFFF}) throw_bad_input("top-K: too many rows");

  SyncStatus sync;  // the synchronous call's statuses (no lock for a caller's row_status)
  int32_t* status = args.row_status;
  if (status == nullptr) {
    sync = sync_status(args.rows);
    status = sync.device;
  }
  const int chosen = blocks_per_row == kTopKAutoBlocksPerRow ? auto_blocks_per_row(args) : blocks_per_row;
  switch (chosen) {
    case 1: launch_cluster<1>(args, status); break;
    case 2: launch_cluster<2>(args, status); break;
    case 4: launch_cluster<4>(args, status); break;
    case 8: launch_cluster<8>(args, status); break;
    default: launch_grid(args, chosen - kTopKGrid, status); break;
  }
  if (args.row_status != nullptr) return;

  // Synchronous use: the statuses come back and the first bad row is named.
  check_cuda(cudaStreamSynchronize(nullptr), "topk_kernel");
  check_topk_row_statuses(std::vector<int32_t>(sync.host, sync.host + args.rows), args.row_stride);
}

void check_topk_row_statuses(const std::vector<int32_t>& statuses, int64_t row_stride) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    switch (static_cast<TopKRowStatus>(statuses[r])) {
      case TopKRowStatus::kOk: continue;
      case TopKRowStatus::kNaN: throw_bad_input("top-K: row " + std::to_string(r) + " has a NaN score");
      case TopKRowStatus::kBadLength:
        throw_bad_input("top-K: row " + std::to_string(r) + " has a valid length outside [0, min(row stride " +
                        std::to_string(row_stride) + ", " + std::to_string(kTopKMaxRowLength) + ")]");
      default:
        throw Error(ErrorKind::kInternal,
                    "top-K: row " + std::to_string(r) + ": the selection count or buffer self-check failed");
    }
  }
}

}  // namespace dsaf::dev
