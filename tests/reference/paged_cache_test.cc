// Paged index-K cache codec: byte positions from the layout formula of docs/numerics.md §4.2 /
// §5.4 / §6.1, computed here independently, and round trips.
#include "reference/paged_cache.h"

#include <random>

#include <gtest/gtest.h>

#include "reference/error.h"

namespace dsaf::ref {
namespace {

StoredHead random_head(const QuantSpec& spec, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float x[kHeadDim];
  for (float& v : x) v = normal(rng);
  return store_head(x, spec);
}

TEST(PagedCacheLayout, BytesPerTokenMatchTheSpec) {
  EXPECT_EQ(cache_bytes_per_token(StorageFormat::kFp8E4m3fn), 132);
  EXPECT_EQ(cache_bytes_per_token(StorageFormat::kBf16), 256);
  EXPECT_EQ(cache_bytes_per_token(StorageFormat::kFp4E2m1), 68);
  EXPECT_EQ(PagedCacheLayout(StorageFormat::kFp8E4m3fn, 64).page_bytes(), 8448);  // SGLang
}

TEST(PagedCacheLayout, Fp8TokenLandsWhereSglangAndDeepGemmPutIt) {
  // Page p base p*8448; token t values at t*128, scale at 8192 + 4t (docs/numerics.md §5.4).
  const PagedCacheLayout layout(StorageFormat::kFp8E4m3fn, 64);
  const std::vector<int32_t> table = {5, 2, 7};
  std::vector<uint8_t> cache(8 * layout.page_bytes(), 0xAA);  // sentinel fill
  QuantSpec spec;
  spec.format = StorageFormat::kFp8E4m3fn;
  std::mt19937 rng(1);
  const StoredHead head = random_head(spec, rng);
  const int64_t pos = 64 + 13;  // page-table entry 1 -> physical page 2, offset 13
  const CacheLocation at = layout.locate(table, pos, 8);
  EXPECT_EQ(at.page, 2);
  EXPECT_EQ(at.offset, 13);
  layout.store(cache, at, head);
  const int64_t base = 2 * 8448;
  for (int i = 0; i < 128; ++i) EXPECT_EQ(cache[base + 13 * 128 + i], head.value_bytes[i]);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(cache[base + 8192 + 13 * 4 + i], head.scale_bytes[i]);
  // Nothing else was touched.
  int64_t touched = 0;
  for (uint8_t b : cache) touched += b != 0xAA;
  int64_t nonsentinel_in_head = 0;
  for (uint8_t b : head.value_bytes) nonsentinel_in_head += b != 0xAA;
  for (uint8_t b : head.scale_bytes) nonsentinel_in_head += b != 0xAA;
  EXPECT_EQ(touched, nonsentinel_in_head);
}

TEST(PagedCacheLayout, RoundTripsEveryFormatAndPageSize) {
  std::mt19937 rng(7);
  for (StorageFormat format : {StorageFormat::kFp8E4m3fn, StorageFormat::kBf16,
                               StorageFormat::kFp4E2m1, StorageFormat::kFp32}) {
    QuantSpec spec;
    spec.format = format;
    spec.block = format == StorageFormat::kFp4E2m1 ? 32 : 128;
    for (int page_size = 1; page_size <= 256; page_size *= 2) {
      const PagedCacheLayout layout(format, page_size);
      const int num_pages = 5;
      std::vector<int32_t> table(num_pages);
      for (int i = 0; i < num_pages; ++i) table[i] = (i * 3 + 1) % num_pages;  // permutation
      std::vector<uint8_t> cache(num_pages * layout.page_bytes());
      std::vector<StoredHead> heads;
      const int tokens = num_pages * page_size;
      for (int pos = 0; pos < tokens; ++pos) {
        heads.push_back(random_head(spec, rng));
        layout.store(cache, layout.locate(table, pos, num_pages), heads.back());
      }
      for (int pos = 0; pos < tokens; ++pos) {
        const StoredHead back = layout.load(cache, layout.locate(table, pos, num_pages));
        ASSERT_EQ(back.value_bytes, heads[pos].value_bytes);
        ASSERT_EQ(back.scale_bytes, heads[pos].scale_bytes);
        ASSERT_EQ(back.dot_values, heads[pos].dot_values);
        ASSERT_EQ(back.dot_scale, heads[pos].dot_scale);
      }
    }
  }
}

TEST(PagedCacheLayout, RejectsBadPageTablesAndSizes) {
  const PagedCacheLayout layout(StorageFormat::kFp8E4m3fn, 64);
  EXPECT_THROW(layout.locate({0, 1}, 128, 4), Error);   // table too short
  EXPECT_THROW(layout.locate({0, 9}, 64, 4), Error);    // page out of range
  EXPECT_THROW(layout.locate({0, -1}, 64, 4), Error);   // negative page
  EXPECT_THROW(layout.locate({0}, -1, 4), Error);       // negative position
  EXPECT_THROW(PagedCacheLayout(StorageFormat::kFp8E4m3fn, 48), Error);
  EXPECT_THROW(PagedCacheLayout(StorageFormat::kFp8E4m3fn, 512), Error);
  EXPECT_THROW(PagedCacheLayout(StorageFormat::kNone, 64), Error);
}

}  // namespace
}  // namespace dsaf::ref
