// File: paged_cache.cc — paged index-K cache codec (paged_cache.h).
#include "reference/paged_cache.h"

#include <algorithm>
#include <string>

#include "reference/error.h"

namespace dsaf::ref {

PagedCacheLayout::PagedCacheLayout(StorageFormat format, int page_size)
    : format_(format),
      page_size_(page_size),
      value_bytes_(value_bytes_per_head(format)),
      scale_bytes_(scale_bytes_per_head(format)) {
  if (page_size < 1 || page_size > 256 || (page_size & (page_size - 1)) != 0) {
    throw_bad_input("page size " + std::to_string(page_size) +
                    " is not a power of two in [1, 256]");
  }
  if (value_bytes_ == 0) throw_bad_input("storage format 'none' has no cache layout");
}

int64_t PagedCacheLayout::value_offset(CacheLocation at) const {
  return at.page * page_bytes() + static_cast<int64_t>(at.offset) * value_bytes_;
}

int64_t PagedCacheLayout::scale_offset(CacheLocation at) const {
  return at.page * page_bytes() + static_cast<int64_t>(page_size_) * value_bytes_ +
         static_cast<int64_t>(at.offset) * scale_bytes_;
}

CacheLocation PagedCacheLayout::locate(const std::vector<int32_t>& page_table, int64_t pos,
                                       int64_t num_pages) const {
  if (pos < 0) throw_bad_input("negative sequence position " + std::to_string(pos));
  const int64_t entry = pos / page_size_;
  if (entry >= static_cast<int64_t>(page_table.size())) {
    throw_bad_input("position " + std::to_string(pos) + " needs page-table entry " +
                    std::to_string(entry) + " but the table has " +
                    std::to_string(page_table.size()));
  }
  const int64_t page = page_table[entry];
  if (page < 0 || page >= num_pages) {
    throw_bad_input("page-table entry " + std::to_string(entry) + " = " +
                    std::to_string(page) + " is outside [0, " + std::to_string(num_pages) + ")");
  }
  return {page, static_cast<int>(pos % page_size_)};
}

void PagedCacheLayout::store(std::vector<uint8_t>& cache, CacheLocation at,
                             const StoredHead& head) const {
  if (head.format != format_) throw_bad_input("stored head format differs from the cache's");
  if (static_cast<int64_t>(cache.size()) < (at.page + 1) * page_bytes()) {
    throw_bad_input("cache buffer too small for page " + std::to_string(at.page));
  }
  std::copy(head.value_bytes.begin(), head.value_bytes.end(), cache.begin() + value_offset(at));
  std::copy(head.scale_bytes.begin(), head.scale_bytes.end(), cache.begin() + scale_offset(at));
}

StoredHead PagedCacheLayout::load(const std::vector<uint8_t>& cache, CacheLocation at) const {
  if (static_cast<int64_t>(cache.size()) < (at.page + 1) * page_bytes()) {
    throw_bad_input("cache buffer too small for page " + std::to_string(at.page));
  }
  return load_head(format_, cache.data() + value_offset(at), cache.data() + scale_offset(at));
}

}  // namespace dsaf::ref
