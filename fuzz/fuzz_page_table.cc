// File: fuzz_page_table.cc
// libFuzzer target: bytes -> a paged index-K cache case (page_table_input.h) -> the
// reference's validators, PagedCacheLayout(format, page_size) and
// PagedCacheLayout::locate(page_table, pos, num_pages), then, for what they accept, a
// small store/gather through PagedCacheLayout::store/load on a real buffer.
// Rejection must be a dsaf::Error. Checked against paged_cache.h's contract:
//   - an accepted page size is a power of two in [1, 256], and bytes per token are the
//     documented 512 / 256 / 132 / 68 / 256 (fp32, bf16, fp8, fp4, fp4-simulated bf16);
//   - locate accepts (pos, table) exactly when pos >= 0, pos / P < table size and the
//     entry is in [0, num_pages); it then returns page = table[pos / P], offset = pos % P;
//   - the value and scale bytes of the location lie inside that page;
//   - store succeeds exactly when the buffer holds the page, and never writes outside it
//     (ASan); after all stores, loading each written slot gives back the bytes of the
//     last head stored there (slots do not overlap).
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "fuzz/harness.h"
#include "fuzz/page_table_input.h"
#include "reference/error.h"
#include "reference/paged_cache.h"
#include "reference/quantize.h"

namespace {

using dsaf::fuzz::PageTableCase;
using dsaf::fuzz::property_failed;
using dsaf::ref::CacheLocation;
using dsaf::ref::PagedCacheLayout;
using dsaf::ref::StorageFormat;
using dsaf::ref::StoredHead;

constexpr int kMaxStores = 1024;  // located positions stored per input (keeps runs fast)
constexpr int64_t kMaxSequential = 4096;  // positions walked in order per sequence
constexpr size_t kMaxProbes = 64;

int documented_bytes_per_token(StorageFormat format) {
  switch (format) {
    case StorageFormat::kFp32: return 512;
    case StorageFormat::kBf16: return 256;
    case StorageFormat::kFp8E4m3fn: return 132;
    case StorageFormat::kFp4E2m1: return 68;
    case StorageFormat::kFp4SimulatedBf16: return 256;
    case StorageFormat::kNone: break;
  }
  return 0;
}

// The bytes of the head that (sequence, position) writes: distinct per writer.
StoredHead head_of(StorageFormat format, int seq, int64_t pos) {
  StoredHead h;
  h.format = format;
  uint64_t x = (static_cast<uint64_t>(pos) << 3) ^ static_cast<uint64_t>(seq) ^ 0x9e3779b97f4a7c15ull;
  const auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<uint8_t>(x);
  };
  h.value_bytes.resize(dsaf::ref::value_bytes_per_head(format));
  h.scale_bytes.resize(dsaf::ref::scale_bytes_per_head(format));
  for (uint8_t& b : h.value_bytes) b = next();
  for (uint8_t& b : h.scale_bytes) b = next();
  return h;
}

class Harness {
 public:
  Harness(const PageTableCase& c, const PagedCacheLayout& layout)
      : case_(c), layout_(layout), format_(layout.format()) {
    const int64_t size = std::max<int64_t>(0, c.cache_pages * layout.page_bytes() + c.cache_slack);
    cache_.assign(static_cast<size_t>(size), 0);
  }

  // Locates (seq, pos) against an independent statement of the rule; stores when
  // accepted. Returns whether locate accepted.
  bool locate_and_store(int seq, const std::vector<int32_t>& table, int64_t pos) {
    const int64_t p = layout_.page_size();
    const bool expect = pos >= 0 && pos / p < static_cast<int64_t>(table.size()) &&
                        table[pos / p] >= 0 && table[pos / p] < case_.num_pages;
    CacheLocation at{};
    try {
      at = layout_.locate(table, pos, case_.num_pages);
    } catch (const dsaf::Error&) {
      if (expect) property_failed("locate rejected a position the contract accepts");
      return false;
    }
    if (!expect) property_failed("locate accepted a position the contract rejects");
    if (at.page != table[pos / p] || at.offset != pos % p) property_failed("locate returned the wrong slot");
    check_regions(at);
    if (stores_ < kMaxStores) store(seq, pos, at);
    return true;
  }

  // Reads back every written slot: each holds the last head stored there.
  void gather() const {
    for (const auto& [slot, writer] : last_writer_) {
      const CacheLocation at{slot.first, slot.second};
      const StoredHead want = head_of(format_, writer.first, writer.second);
      const StoredHead got = layout_.load(cache_, at);
      if (got.format != format_ || got.value_bytes != want.value_bytes || got.scale_bytes != want.scale_bytes) {
        property_failed("a stored slot reads back different bytes (slots overlap)");
      }
    }
  }

 private:
  void check_regions(CacheLocation at) const {
    const int64_t page_begin = at.page * layout_.page_bytes();
    const int64_t page_end = page_begin + layout_.page_bytes();
    const int64_t v = layout_.value_offset(at), s = layout_.scale_offset(at);
    const int64_t nv = dsaf::ref::value_bytes_per_head(format_), ns = dsaf::ref::scale_bytes_per_head(format_);
    if (v < page_begin || v + nv > page_end || s < page_begin || s + ns > page_end) {
      property_failed("a located slot's bytes leave its page");
    }
  }

  void store(int seq, int64_t pos, CacheLocation at) {
    ++stores_;
    const bool fits = static_cast<int64_t>(cache_.size()) >= (at.page + 1) * layout_.page_bytes();
    try {
      layout_.store(cache_, at, head_of(format_, seq, pos));
    } catch (const dsaf::Error&) {
      if (fits) property_failed("store rejected a slot inside the buffer");
      return;
    }
    if (!fits) property_failed("store accepted a slot outside the buffer");
    last_writer_[{at.page, at.offset}] = {seq, pos};
  }

  const PageTableCase& case_;
  const PagedCacheLayout& layout_;
  StorageFormat format_;
  std::vector<uint8_t> cache_;
  std::map<std::pair<int64_t, int>, std::pair<int, int64_t>> last_writer_;
  int stores_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const PageTableCase c = dsaf::fuzz::decode_page_table_case(data, size);
  const auto format = static_cast<StorageFormat>(c.format);
  std::optional<PagedCacheLayout> layout;
  try {
    layout.emplace(format, c.page_size);
  } catch (const dsaf::Error&) {
    return 0;
  }
  const int p = layout->page_size();
  if (p != c.page_size || p < 1 || p > 256 || (p & (p - 1)) != 0) property_failed("bad page size accepted");
  if (layout->bytes_per_token() != documented_bytes_per_token(format)) {
    property_failed("bytes per token differ from paged_cache.h");
  }
  if (layout->page_bytes() != static_cast<int64_t>(p) * layout->bytes_per_token()) {
    property_failed("page_bytes != P x bytes per token");
  }

  Harness h(c, *layout);
  // Each sequence's first positions in order, until the first one the table cannot hold,
  // then the positions around the table's end (T x P - 2 .. T x P + 1).
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const auto& seq = c.seqs[s];
    const int si = static_cast<int>(s);
    for (int64_t pos = 0; pos < seq.seq_len && pos < kMaxSequential; ++pos) {
      if (!h.locate_and_store(si, seq.table, pos)) break;
    }
    const int64_t end = static_cast<int64_t>(seq.table.size()) * p;
    for (int64_t pos = end - 2; pos <= end + 1; ++pos) {
      if (pos < seq.seq_len) h.locate_and_store(si, seq.table, pos);
    }
  }
  // Arbitrary positions, negative and huge included.
  const std::vector<int32_t> no_table;
  for (size_t i = 0; i < c.probes.size() && i < kMaxProbes; ++i) {
    const auto& probe = c.probes[i];
    const int s = c.seqs.empty() ? -1 : probe.seq % static_cast<int>(c.seqs.size());
    h.locate_and_store(s, s < 0 ? no_table : c.seqs[s].table, probe.pos);
  }
  h.gather();
  return 0;
}
