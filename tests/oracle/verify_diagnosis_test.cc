// run_verify's key-stage diagnosis (oracle/verify.h) without a GPU: the kernel under test
// is the reference itself (its key path under a recipe of the test's choosing, its query
// path under verify's recipe), with the cache bytes it returns changed the way the
// gallery's plug-ins change theirs (docs/gallery.md): scales on the next page, NaN codes,
// one path departing from the recipe in a field. The diagnosis must name each, and say
// nothing of the kind for the faithful kernel.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device/api.h"
#include "oracle/verify.h"
#include "reference/error.h"
#include "reference/numeric/minifloat.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/rope.h"
#include "tests/oracle/reference_query.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;

enum class Tamper { kNone, kScaleOnNextPage, kNanCodes };

class ReferenceKernel : public dev::KernelUnderTest {
 public:
  ReferenceKernel(ref::Recipe key_recipe, Tamper tamper) : key_recipe_(std::move(key_recipe)), tamper_(tamper) {}

  std::string name() const override { return "the reference (test)"; }

  dev::KernelCapabilities capabilities() const override {
    dev::KernelCapabilities c;
    c.key_store = c.query_path = true;
    c.store_formats = 1u << static_cast<int>(key_recipe_.key_quant.format);
    c.page_sizes = 0x1FFu;
    c.bf16_input = c.fp32_input = true;
    c.max_tokens = 40;  // small batches keep the test fast
    return c;
  }

  std::vector<uint8_t> key_store(const dev::HostKeyBatch& b) const override {
    const ref::PagedCacheLayout layout(b.recipe.key_quant.format, b.page_size);
    const ref::RopeTable rope(key_recipe_.rope.table, static_cast<int>(b.rope_cos.size() / 32));
    const ref::NormParams norm{b.norm_weight.data(), b.norm_bias.data()};
    std::vector<uint8_t> cache = b.cache, stored = b.cache;
    float in[kHeadDim];
    for (size_t t = 0; t < b.positions.size(); ++t) {
      for (int i = 0; i < kHeadDim; ++i) {
        in[i] = b.bf16 ? ref::decode_bf16(b.input_bf16[t * kHeadDim + i]) : b.input_f32[t * kHeadDim + i];
      }
      const int p = b.positions[t];
      const int64_t page = b.page_tables[b.seq[t] * b.page_table_stride + p / b.page_size];
      const ref::CacheLocation at{page, p % b.page_size};
      layout.store(stored, at, ref::run_key_path(key_recipe_, in, p, norm, rope));
      // The token's bytes, by the layout formula of paged_cache.h: values, then its scale,
      // which kScaleOnNextPage writes one page on (and not at all past the last page).
      const int value_bytes = ref::value_bytes_per_head(layout.format());
      const int scale_bytes = ref::scale_bytes_per_head(layout.format());
      const int64_t values = page * layout.page_bytes() + at.offset * value_bytes;
      for (int i = 0; i < value_bytes; ++i) cache[values + i] = stored[values + i];
      const int64_t scale = page * layout.page_bytes() + b.page_size * value_bytes + at.offset * scale_bytes;
      const int64_t to = tamper_ == Tamper::kScaleOnNextPage ? scale + layout.page_bytes() : scale;
      for (int i = 0; i < scale_bytes && to < static_cast<int64_t>(cache.size()); ++i) cache[to + i] = stored[scale + i];
      if (tamper_ == Tamper::kNanCodes && p % 16 == 0) cache[values + (p / 16) % value_bytes] |= 0x7F;
    }
    return cache;
  }

  dev::HostQueryResult query_quant(const dev::HostQueryBatch& q) const override {
    return test::reference_query_quant(ref::preset(verify_recipe_name()), q);
  }


  std::vector<float> paged_logits(const dev::HostLogitsBatch&) const override {
    throw Error(ErrorKind::kBadInput, "not provided");
  }
  std::vector<int32_t> topk(const dev::HostTopKBatch&) const override {
    throw Error(ErrorKind::kBadInput, "not provided");
  }

  static const char* verify_recipe_name() { return "sglang-v4-fp8"; }

 private:
  ref::Recipe key_recipe_;
  Tamper tamper_;
};

VerifyReport verify_with(const ref::Recipe& key_recipe, Tamper tamper) {
  VerifyConfig config;
  config.recipe = ref::preset(ReferenceKernel::verify_recipe_name());
  config.min_key_tokens = 200;
  config.query_tokens = 4;
  config.num_heads = 8;
  return run_verify(ReferenceKernel(key_recipe, tamper), config);
}

bool has(const VerifyReport& r, const std::string& text) { return r.text.find(text) != std::string::npos; }

const ref::Recipe& recipe() { return ref::preset(ReferenceKernel::verify_recipe_name()); }

TEST(VerifyDiagnosis, TheFaithfulKernelPassesWithNoDiagnosis) {
  const VerifyReport r = verify_with(recipe(), Tamper::kNone);
  EXPECT_TRUE(r.pass) << r.text;
  EXPECT_TRUE(has(r, "key cache: byte-exact on")) << r.text;
  EXPECT_TRUE(has(r, "q codes: byte-exact")) << r.text;
  EXPECT_FALSE(has(r, "explained by")) << r.text;
  EXPECT_FALSE(has(r, "disagree")) << r.text;
}

TEST(VerifyDiagnosis, ScalesOnTheNextPageAreNamedAsSuch) {
  const VerifyReport r = verify_with(recipe(), Tamper::kScaleOnNextPage);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(has(r, "key cache: MISMATCH")) << r.text;
  EXPECT_TRUE(has(r, " (0 in values, ")) << r.text;
  EXPECT_TRUE(has(r, "explained by the page layout: every key's values are in the slot its page table entry names "
                     "and its scale in the same slot of the next page of the cache (physical page + 1)"))
      << r.text;
  EXPECT_FALSE(has(r, "NaN codes")) << r.text;
  EXPECT_TRUE(has(r, "q codes: byte-exact")) << r.text;  // the query path is not blamed
}

TEST(VerifyDiagnosis, NanCodesAreCountedAndNothingElseExplainsThem) {
  const VerifyReport r = verify_with(recipe(), Tamper::kNanCodes);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(has(r, "key cache: MISMATCH")) << r.text;
  EXPECT_TRUE(has(r, "are NaN codes in the actual cache where the reference has a number")) << r.text;
  EXPECT_TRUE(has(r, ", 0 in scales)")) << r.text;
  EXPECT_TRUE(has(r, "no single recipe field, slot shift or scale page shift explains it")) << r.text;
  const nlohmann::json& key = r.json["stages"][0];
  EXPECT_EQ(key["stage"], "key cache");
  EXPECT_GT(key["nan_codes"].get<int64_t>(), 0);
  EXPECT_EQ(key["nan_codes"], key["differing_bytes"]["values"]);  // one byte a code, every one a NaN
  EXPECT_EQ(key["differing_bytes"]["scales"], 0);
}

TEST(VerifyDiagnosis, AKeyPathWithoutTheHadamardDisagreesWithTheQueryPath) {
  ref::Recipe keys = recipe();
  ASSERT_TRUE(keys.hadamard);
  keys.hadamard = false;
  const VerifyReport r = verify_with(keys, Tamper::kNone);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(has(r, "explained by one recipe field: hadamard: true -> false")) << r.text;
  EXPECT_TRUE(has(r, "key and query paths disagree: the key cache follows hadamard: true -> false, the query path "
                     "follows the recipe"))
      << r.text;
  ASSERT_TRUE(r.json.contains("key_query_disagreement"));
  EXPECT_EQ(r.json["key_query_disagreement"][0], "hadamard: true -> false");
}

TEST(VerifyDiagnosis, AKeyPathWithTheOtherRopePairingDisagreesWithTheQueryPath) {
  ref::Recipe keys = recipe();
  ASSERT_EQ(keys.rope.pairing, ref::RopePairing::kInterleaved);
  keys.rope.pairing = ref::RopePairing::kNeox;
  const VerifyReport r = verify_with(keys, Tamper::kNone);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(has(r, "explained by one recipe field: rope.pairing: \"interleaved\" -> \"neox\"")) << r.text;
  EXPECT_TRUE(has(r, "key and query paths disagree: the key cache follows rope.pairing")) << r.text;
}

// key_rounding.hadamard (bf16 after the key's rotation) is read by the key path alone: the
// query path would not change under it, so nothing is said of the two sides.
TEST(VerifyDiagnosis, AKeyOnlyFieldIsNoDisagreement) {
  ref::Recipe keys = recipe();
  ASSERT_FALSE(keys.key_rounding.hadamard);
  keys.key_rounding.hadamard = true;
  const VerifyReport r = verify_with(keys, Tamper::kNone);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(has(r, "explained by one recipe field: key_rounding.hadamard: false -> true")) << r.text;
  EXPECT_FALSE(has(r, "disagree")) << r.text;
}

}  // namespace
}  // namespace dsaf::oracle
