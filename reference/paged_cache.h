// File: paged_cache.h
// The paged index-K cache codec (docs/numerics.md §4.2, §5.4, §6.1, §7.2).
// A page holds P tokens (P a power of two, 1..256) as two regions:
//   [ P x value_bytes | P x scale_bytes ]
//   fp8  : value 128 B (e4m3fn codes),       scale 4 B (fp32)        -> 132 B/token
//   bf16 : value 256 B (bf16, little-endian), no scale              -> 256 B/token
//   fp4  : value 64 B (e2m1, low nibble first), scale 4 B (ue8m0 x4) -> 68 B/token
//   fp32 : value 512 B, no scale                                     -> 512 B/token
// Token t of page p: value at p*page_bytes + t*value_bytes, scale at
// p*page_bytes + P*value_bytes + t*scale_bytes. The slot of sequence position `pos` is
// page_table[pos / P] * P + pos % P.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/quantize.h"
#include "reference/recipe.h"

namespace dsaf::ref {

struct CacheLocation {
  int64_t page;
  int offset;  // token within the page
};

class PagedCacheLayout {
 public:
  PagedCacheLayout(StorageFormat format, int page_size);

  StorageFormat format() const { return format_; }
  int page_size() const { return page_size_; }
  int64_t page_bytes() const { return static_cast<int64_t>(page_size_) * bytes_per_token(); }
  int bytes_per_token() const { return value_bytes_ + scale_bytes_; }
  int64_t value_offset(CacheLocation at) const;
  int64_t scale_offset(CacheLocation at) const;

  // Where position `pos` of a sequence lives; throws dsaf::Error(kBadInput) when the
  // page table is too short, or names a page outside [0, num_pages).
  CacheLocation locate(const std::vector<int32_t>& page_table, int64_t pos,
                       int64_t num_pages) const;

  // Writes / reads one token of `cache` (num_pages * page_bytes() bytes).
  void store(std::vector<uint8_t>& cache, CacheLocation at, const StoredHead& head) const;
  StoredHead load(const std::vector<uint8_t>& cache, CacheLocation at) const;

 private:
  StorageFormat format_;
  int page_size_;
  int value_bytes_;
  int scale_bytes_;
};

}  // namespace dsaf::ref
