// File: paging.cuh
// The slot of a sequence position in a paged cache (reference/paged_cache.h): page
// table entry pos / P, offset pos % P. Page sizes are powers of two (the launchers check),
// so both are a shift and a mask: a 64-bit division would cost about a hundred
// instructions per key.
#pragma once

#include <cstdint>

namespace dsaf::dev {

struct PageSlot {
  int64_t table_index;  // pos / P, within the sequence's page-table row
  int offset;           // pos % P
};

__device__ __forceinline__ PageSlot page_slot(int64_t position, int page_size) {
  const int shift = __ffs(page_size) - 1;  // log2 P
  return {position >> shift, static_cast<int>(position & (page_size - 1))};
}

}  // namespace dsaf::dev
