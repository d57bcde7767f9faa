// File: verify.cc — the verify harness (verify.h).
#include "oracle/verify.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "oracle/detect.h"
#include "oracle/verdict.h"
#include "reference/numeric/minifloat.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/rope.h"

namespace dsaf::oracle {
namespace {

using ref::kHeadDim;
constexpr int kMaxPositions = 4096;

// One row of 128 inputs, the kind drawn per row: zeros, tiny, huge, a spike, outlier
// channels or Gaussian.
void random_row(std::mt19937_64& rng, float* out) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  for (int i = 0; i < kHeadDim; ++i) {
    switch (kind) {
      case 0: out[i] = 0.0f; break;
      case 1: out[i] = normal(rng) * 1e-30f; break;
      case 2: out[i] = normal(rng) * 1e15f; break;
      case 3: out[i] = i == 7 ? 1000.0f : normal(rng) * 1e-3f; break;
      case 4: case 5: out[i] = normal(rng) * (i % 29 == 3 ? 80.0f : 1.0f); break;
      default: out[i] = normal(rng); break;
    }
  }
}

// A key batch: sequences with their own page tables (a shuffled pool with spare pages).
// Prefill writes positions 0..len-1 of every sequence; decode writes only the last one.
struct KeyBatch {
  dev::HostKeyBatch host;
  std::vector<float> values;  // the fp32 values the reference sees, [T][128]
  CacheOwnership owners;
  int64_t num_pages = 0;
  bool decode = false;
};

KeyBatch make_batch(std::mt19937_64& rng, int page_size, bool decode, bool bf16, const ref::Recipe& recipe,
                    const ref::RopeTable& rope, const std::vector<float>& weight, const std::vector<float>& bias) {
  KeyBatch b;
  b.decode = decode;
  const int seqs = decode ? std::uniform_int_distribution<int>(8, 64)(rng) : std::uniform_int_distribution<int>(1, 6)(rng);
  std::vector<int64_t> lens;
  for (int s = 0; s < seqs; ++s) lens.push_back(std::uniform_int_distribution<int64_t>(1, kMaxPositions / 4)(rng));
  const int64_t longest = *std::max_element(lens.begin(), lens.end());
  const int64_t stride = (longest + page_size - 1) / page_size;
  b.num_pages = stride * seqs + std::uniform_int_distribution<int>(0, 3)(rng);
  std::vector<int32_t> pool(b.num_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  dev::HostKeyBatch& h = b.host;
  h.page_tables.assign(pool.begin(), pool.begin() + stride * seqs);
  h.page_table_stride = stride;
  h.page_size = page_size;
  for (int s = 0; s < seqs; ++s) {
    b.owners.page_tables.emplace_back(h.page_tables.begin() + s * stride, h.page_tables.begin() + (s + 1) * stride);
    b.owners.seq_lens.push_back(lens[s]);
    for (int64_t p = decode ? lens[s] - 1 : 0; p < lens[s]; ++p) {
      h.seq.push_back(s);
      h.positions.push_back(static_cast<int32_t>(p));
    }
  }
  const int64_t T = static_cast<int64_t>(h.positions.size());
  b.values.resize(T * kHeadDim);
  for (int64_t t = 0; t < T; ++t) random_row(rng, b.values.data() + t * kHeadDim);
  h.bf16 = bf16;
  if (bf16) {
    h.input_bf16.resize(b.values.size());
    for (size_t i = 0; i < b.values.size(); ++i) {
      h.input_bf16[i] = ref::encode_bf16(b.values[i]);
      b.values[i] = ref::decode_bf16(h.input_bf16[i]);
    }
  } else {
    h.input_f32 = b.values;
  }
  h.rope_cos.assign(rope.cos(0), rope.cos(0) + static_cast<size_t>(kMaxPositions) * 32);
  h.rope_sin.assign(rope.sin(0), rope.sin(0) + static_cast<size_t>(kMaxPositions) * 32);
  h.norm_weight = weight;
  h.norm_bias = bias;
  const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
  h.cache.assign(b.num_pages * layout.page_bytes(), 0xAA);  // sentinel: untouched bytes stay 0xAA
  h.recipe = recipe;
  return b;
}

// The reference's cache for a batch, optionally with every key moved `shift` slots on
// within its page (to recognise a page-offset bug).
std::vector<uint8_t> reference_cache(const ref::Recipe& recipe, const KeyBatch& b, int shift = 0) {
  const dev::HostKeyBatch& h = b.host;
  const ref::PagedCacheLayout layout(recipe.key_quant.format, h.page_size);
  const ref::RopeTable rope(recipe.rope.table, kMaxPositions);
  const ref::NormParams norm{h.norm_weight.data(), h.norm_bias.data()};
  std::vector<uint8_t> cache = h.cache;
  for (size_t t = 0; t < h.positions.size(); ++t) {
    const ref::StoredHead head = ref::run_key_path(recipe, b.values.data() + t * kHeadDim, h.positions[t], norm, rope);
    ref::CacheLocation at = layout.locate(b.owners.page_tables[h.seq[t]], h.positions[t], b.num_pages);
    at.offset = (at.offset + shift + h.page_size) % h.page_size;
    layout.store(cache, at, head);
  }
  return cache;
}

// Which single recipe field, changed, makes `matches(recipe')` true.
template <class Matches>
std::vector<std::string> explaining_changes(const ref::Recipe& recipe, Matches matches) {
  std::vector<std::string> out;
  for (const auto& [change, variant] : single_field_changes(recipe)) {
    if (matches(variant)) out.push_back(change);
  }
  return out;
}

std::string page_class(int page_size) { return page_size <= 8 ? "1-8" : page_size <= 64 ? "16-64" : "128-256"; }

}  // namespace

VerifyReport run_verify(const dev::KernelUnderTest& kernel, const VerifyConfig& config) {
  const ref::Recipe& recipe = config.recipe;
  VerifyReport report;
  std::mt19937_64 rng(config.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> weight(kHeadDim), bias(kHeadDim);
  for (int i = 0; i < kHeadDim; ++i) weight[i] = 1.0f + 0.2f * normal(rng), bias[i] = 0.1f * normal(rng);
  const ref::RopeTable rope(recipe.rope.table, kMaxPositions);
  const ref::PagedCacheLayout probe(recipe.key_quant.format, 1);  // validates the format

  // ---- Key path ---------------------------------------------------------------------
  int64_t tokens = 0, batches = 0;
  std::map<std::string, int64_t> tokens_by_class;
  nlohmann::json key = {{"stage", "key cache"}};
  bool key_ok = true;
  // Every page size 1..256 in both layouts at least once (18 batches), then until enough tokens.
  constexpr int kMinBatches = 18;
  std::set<int> page_sizes_seen;
  while ((tokens < config.min_key_tokens || batches < kMinBatches) && key_ok) {
    const int page_size = 1 << (batches % 9);
    const bool decode = (batches / 9) % 2 == 1, bf16 = batches % 2 == 0;
    page_sizes_seen.insert(page_size);
    const KeyBatch b = make_batch(rng, page_size, decode, bf16, recipe, rope, weight, bias);
    const std::vector<uint8_t> expected = reference_cache(recipe, b);
    const std::vector<uint8_t> actual = kernel.key_store(b.host);
    const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
    const ByteVerdict v = compare_paged_cache(layout, b.owners, expected, actual);
    tokens += static_cast<int64_t>(b.host.positions.size());
    tokens_by_class[page_class(page_size)] += static_cast<int64_t>(b.host.positions.size());
    ++batches;
    if (v.pass) continue;
    key_ok = false;
    std::string text = "key cache: MISMATCH in batch " + std::to_string(batches - 1) + " (page size " +
                       std::to_string(page_size) + ", " + (decode ? "decode" : "prefill") + ", " +
                       (bf16 ? "bf16" : "fp32") + " input)\n  " + v.describe() + "\n";
    const auto fields = explaining_changes(recipe, [&](const ref::Recipe& r) {
      return r.key_quant.format == recipe.key_quant.format && reference_cache(r, b) == actual;
    });
    for (const std::string& f : fields) text += "  explained by one recipe field: " + f + "\n";
    for (int shift : {1, -1, 2, -2}) {
      if (std::abs(shift) < page_size && reference_cache(recipe, b, shift) == actual) {
        text += "  explained by the page layout: every key is written " + std::to_string(std::abs(shift)) +
                " slot(s) " + (shift > 0 ? "after" : "before") + " the one its page table entry names\n";
        break;
      }
    }
    if (fields.empty() && text.find("page layout") == std::string::npos) text += "  no single recipe field or slot shift explains it\n";
    key["diagnosis"] = text;
    report.text += text;
  }
  key["pass"] = key_ok;
  key["tokens"] = tokens;
  key["batches"] = batches;
  key["tokens_by_page_size_class"] = tokens_by_class;
  if (key_ok) {
    std::string sizes;
    for (int p : page_sizes_seen) sizes += (sizes.empty() ? "" : ",") + std::to_string(p);
    report.text += "key cache: byte-exact on " + std::to_string(tokens) + " tokens in " + std::to_string(batches) +
                   " batches (page sizes " + sizes + "; prefill and decode; bf16 and fp32 inputs)\n";
  }
  report.pass = key_ok;
  report.json["stages"] = nlohmann::json::array({key});

  // ---- Query path -------------------------------------------------------------------
  if (!kernel.has_query_path()) {
    report.text += "query path: not provided by the kernel\n";
    verify_scoring(kernel, config, rng, report);
    return report;
  }
  dev::HostQueryBatch q;
  q.num_tokens = config.query_tokens;
  q.num_heads = config.num_heads;
  std::vector<float> values(q.num_tokens * q.num_heads * kHeadDim);
  for (int64_t r = 0; r < q.num_tokens * q.num_heads; ++r) random_row(rng, values.data() + r * kHeadDim);
  q.input_bf16.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    q.input_bf16[i] = ref::encode_bf16(values[i]);
    values[i] = ref::decode_bf16(q.input_bf16[i]);
  }
  for (int64_t t = 0; t < q.num_tokens; ++t) {
    q.positions.push_back(std::uniform_int_distribution<int>(0, kMaxPositions - 1)(rng));
    for (int h = 0; h < q.num_heads; ++h) q.wproj.push_back(normal(rng));
  }
  q.rope_cos.assign(rope.cos(0), rope.cos(0) + static_cast<size_t>(kMaxPositions) * 32);
  q.rope_sin.assign(rope.sin(0), rope.sin(0) + static_cast<size_t>(kMaxPositions) * 32);
  q.recipe = recipe;
  const dev::HostQueryResult got = kernel.query_quant(q);
  // The reference's outputs in the kernel's layout, for a recipe.
  const auto expected_query = [&](const ref::Recipe& r) {
    dev::HostQueryResult e;
    for (int64_t t = 0; t < q.num_tokens; ++t) {
      const ref::QueryOutput out = ref::run_query_path(r, values.data() + t * q.num_heads * kHeadDim, q.num_heads,
                                                       q.wproj.data() + t * q.num_heads, q.positions[t], rope);
      for (int h = 0; h < q.num_heads; ++h) {
        e.values.insert(e.values.end(), out.heads[h].value_bytes.begin(), out.heads[h].value_bytes.end());
        e.scales.insert(e.scales.end(), out.heads[h].scale_bytes.begin(), out.heads[h].scale_bytes.end());
        e.weights.push_back(static_cast<float>(out.weights[h]));
      }
    }
    return e;
  };
  const dev::HostQueryResult want = expected_query(recipe);
  const auto same_floats = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  nlohmann::json stages = report.json["stages"];
  bool query_ok = true;
  const int64_t heads = q.num_tokens * q.num_heads;
  const int vb = ref::value_bytes_per_head(recipe.query_quant.format);
  for (const auto& [name, a, b] : {std::tuple{"q codes", &want.values, &got.values},
                                   std::tuple{"q scales", &want.scales, &got.scales}}) {
    const ByteVerdict v = compare_bytes(*a, *b);
    if (v.pass) {
      report.text += std::string(name) + ": byte-exact on " + std::to_string(heads) + " heads\n";
    } else {
      query_ok = false;
      std::string where;
      if (v.first) {
        const int64_t per_head = std::string(name) == "q codes" ? vb : ref::scale_bytes_per_head(recipe.query_quant.format);
        const int64_t off = v.first->byte_offset;
        where = " (first at token " + std::to_string(off / per_head / q.num_heads) + ", head " +
                std::to_string(off / per_head % q.num_heads) + ", byte " + std::to_string(off % per_head) + ")";
      }
      report.text += std::string(name) + ": MISMATCH, " + std::to_string(v.mismatches) + " of " +
                     std::to_string(v.bytes) + " bytes differ" + where + "\n  " + v.describe() + "\n";
    }
    stages.push_back({{"stage", name}, {"pass", v.pass}, {"mismatches", v.mismatches}, {"bytes", v.bytes}});
  }
  const bool weights_ok = same_floats(want.weights, got.weights);
  report.text += weights_ok ? "head weights: bit-exact on " + std::to_string(heads) + " heads\n"
                            : std::string("head weights: MISMATCH\n");
  stages.push_back({{"stage", "head weights"}, {"pass", weights_ok}});
  query_ok = query_ok && weights_ok;
  if (!query_ok) {
    const auto fields = explaining_changes(recipe, [&](const ref::Recipe& r) {
      if (r.query_quant.format != recipe.query_quant.format) return false;
      const dev::HostQueryResult e = expected_query(r);
      return e.values == got.values && e.scales == got.scales && same_floats(e.weights, got.weights);
    });
    for (const std::string& f : fields) report.text += "  query path explained by one recipe field: " + f + "\n";
    if (fields.empty()) report.text += "  no single recipe field explains the query path\n";
  }
  report.json["stages"] = stages;
  report.pass = report.pass && query_ok;
  verify_scoring(kernel, config, rng, report);
  return report;
}

}  // namespace dsaf::oracle
