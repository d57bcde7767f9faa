// File: verify.cc — the verify harness (verify.h).
#include "oracle/verify.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <map>
#include <set>
#include <tuple>

#include "oracle/detect.h"
#include "oracle/topk_verdict.h"
#include "oracle/verdict.h"
#include "reference/numeric/minifloat.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/recipe_json.h"
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

// Sequences of at most max_len positions and at most max_tokens written tokens a batch
// (the kernel's declared limits; 0: none).
KeyBatch make_batch(std::mt19937_64& rng, int page_size, bool decode, bool bf16, const ref::Recipe& recipe,
                    const ref::RopeTable& rope, const std::vector<float>& weight, const std::vector<float>& bias,
                    int64_t max_len, int64_t max_tokens) {
  KeyBatch b;
  b.decode = decode;
  int seqs = decode ? std::uniform_int_distribution<int>(8, 64)(rng) : std::uniform_int_distribution<int>(1, 6)(rng);
  if (max_tokens > 0 && decode) seqs = static_cast<int>(std::min<int64_t>(seqs, max_tokens));
  std::vector<int64_t> lens;
  int64_t written = 0;
  for (int s = 0; s < seqs; ++s) {
    int64_t len = std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(max_len, kMaxPositions / 4))(rng);
    const int64_t tokens = decode ? 1 : len;
    if (max_tokens > 0 && written + tokens > max_tokens) {
      if (s > 0) break;
      len = max_tokens;  // a prefill of one sequence at the limit
    }
    written += decode ? 1 : len;
    lens.push_back(len);
  }
  seqs = static_cast<int>(lens.size());
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

// A batch's cache with every key's values where `expected` has them and its scale bytes
// moved to the same slot of physical page (page + page_shift): what a kernel that
// addresses its scale with the wrong page writes. A scale whose page falls outside the
// cache is not written (such a kernel writes past the buffer).
std::vector<uint8_t> scales_on_other_page(const ref::PagedCacheLayout& layout, const KeyBatch& b,
                                          const std::vector<uint8_t>& expected, int page_shift) {
  const dev::HostKeyBatch& h = b.host;
  const int value_bytes = ref::value_bytes_per_head(layout.format());
  const int scale_bytes = ref::scale_bytes_per_head(layout.format());
  std::vector<uint8_t> cache = h.cache;
  for (size_t t = 0; t < h.positions.size(); ++t) {
    const ref::CacheLocation at = layout.locate(b.owners.page_tables[h.seq[t]], h.positions[t], b.num_pages);
    const int64_t values = layout.value_offset(at);
    std::copy(expected.begin() + values, expected.begin() + values + value_bytes, cache.begin() + values);
    const ref::CacheLocation moved{at.page + page_shift, at.offset};
    if (moved.page < 0 || moved.page >= b.num_pages) continue;
    const int64_t from = layout.scale_offset(at), to = layout.scale_offset(moved);
    std::copy(expected.begin() + from, expected.begin() + from + scale_bytes, cache.begin() + to);
  }
  return cache;
}

// The single recipe field changes that make `matches(recipe')` true: (change, recipe').
template <class Matches>
std::vector<std::pair<std::string, ref::Recipe>> explaining_changes(const ref::Recipe& recipe, Matches matches) {
  std::vector<std::pair<std::string, ref::Recipe>> out;
  for (auto& [change, variant] : single_field_changes(recipe)) {
    if (matches(variant)) out.emplace_back(change, variant);
  }
  return out;
}

std::string page_class(int page_size) { return page_size <= 8 ? "1-8" : page_size <= 64 ? "16-64" : "128-256"; }

std::string list_text(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

// The key cache stage: batches over every declared page size x layout x input dtype
// (each at least once), until config.min_key_tokens tokens. Returns the single recipe
// field changes that explain a failing batch's bytes (empty when it passed).
std::vector<std::pair<std::string, ref::Recipe>> verify_key_cache(const dev::KernelUnderTest& kernel,
                                                                  const dev::KernelCapabilities& caps,
                                                                  const VerifyConfig& config, std::mt19937_64& rng,
                                                                  VerifyReport& report) {
  const ref::Recipe& recipe = config.recipe;
  nlohmann::json key = {{"stage", "key cache"}};
  std::vector<std::pair<std::string, ref::Recipe>> fields;
  if (!caps.key_store) {
    report.text += "key cache: not provided by the kernel\n";
    return fields;
  }
  const std::string format = ref::field_value_json(recipe, "key_quant.format").get<std::string>();
  if (!caps.stores(recipe.key_quant.format)) {
    report.text += "key cache: NOT COVERED: the recipe stores " + format + " keys and the kernel declares no " + format +
                   " store\n";
    report.json["coverage"]["not_covered"].push_back("key cache: no " + format + " store");
    return fields;
  }
  std::vector<int> page_sizes, missing_sizes;
  for (int p = 1; p <= 256; p *= 2) (caps.takes_page_size(p) ? page_sizes : missing_sizes).push_back(p);
  std::vector<bool> dtypes;  // bf16?
  if (caps.bf16_input) dtypes.push_back(true);
  if (caps.fp32_input) dtypes.push_back(false);
  if (page_sizes.empty() || dtypes.empty()) {
    report.text += "key cache: NOT COVERED: the kernel declares no page size or no input dtype\n";
    report.json["coverage"]["not_covered"].push_back("key cache: no page size or input dtype declared");
    return fields;
  }
  // The norm parameters a bf16-taking kernel sees are bf16 values: draw such values.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> weight(kHeadDim), bias(kHeadDim);
  for (int i = 0; i < kHeadDim; ++i) weight[i] = 1.0f + 0.2f * normal(rng), bias[i] = 0.1f * normal(rng);
  if (caps.norm_params_bf16) {
    for (float* v : {weight.data(), bias.data()}) {
      for (int i = 0; i < kHeadDim; ++i) v[i] = ref::decode_bf16(ref::encode_bf16(v[i]));
    }
  }
  const int64_t max_len = caps.max_position > 0 ? std::min<int64_t>(caps.max_position + 1, kMaxPositions) : kMaxPositions;
  const ref::RopeTable rope(recipe.rope.table, kMaxPositions);
  const int64_t cells = static_cast<int64_t>(page_sizes.size()) * 2 * static_cast<int64_t>(dtypes.size());
  int64_t tokens = 0, batches = 0;
  std::map<std::string, int64_t> tokens_by_class;
  std::map<std::tuple<int, bool, bool>, std::pair<int64_t, int64_t>> coverage;  // (page, decode, bf16) -> batches, tokens
  bool key_ok = true;
  const auto progress = [&] {
    if (config.progress) config.progress("key cache", std::min(tokens, config.min_key_tokens), config.min_key_tokens);
  };
  progress();
  while ((tokens < config.min_key_tokens || batches < cells) && key_ok) {
    const int page_size = page_sizes[batches % page_sizes.size()];
    const bool decode = (batches / static_cast<int64_t>(page_sizes.size())) % 2 == 1;
    const bool bf16 = dtypes[(batches / (2 * static_cast<int64_t>(page_sizes.size()))) % dtypes.size()];
    const KeyBatch b = make_batch(rng, page_size, decode, bf16, recipe, rope, weight, bias, max_len, caps.max_tokens);
    const std::vector<uint8_t> expected = reference_cache(recipe, b);
    const std::vector<uint8_t> actual = kernel.key_store(b.host);
    const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
    const ByteVerdict v = compare_paged_cache(layout, b.owners, expected, actual);
    const int64_t batch_tokens = static_cast<int64_t>(b.host.positions.size());
    tokens += batch_tokens;
    progress();
    tokens_by_class[page_class(page_size)] += batch_tokens;
    auto& cell = coverage[{page_size, decode, bf16}];
    cell.first += 1, cell.second += batch_tokens;
    if (config.keep_key_batch && (!report.saved || (!v.pass && !report.saved->failed))) {
      report.saved = SavedKeyBatch{b.host, actual, !v.pass, batches};
    }
    ++batches;
    if (v.pass) continue;
    key_ok = false;
    std::string text = "key cache: MISMATCH in batch " + std::to_string(batches - 1) + " (page size " +
                       std::to_string(page_size) + ", " + (decode ? "decode" : "prefill") + ", " +
                       (bf16 ? "bf16" : "fp32") + " input)\n  " + v.describe() + "\n";
    fields = explaining_changes(recipe, [&](const ref::Recipe& r) {
      return r.key_quant.format == recipe.key_quant.format && reference_cache(r, b) == actual;
    });
    for (const auto& field : fields) text += "  explained by one recipe field: " + field.first + "\n";
    bool moved = false;
    for (int shift : {1, -1, 2, -2}) {
      if (std::abs(shift) < page_size && reference_cache(recipe, b, shift) == actual) {
        text += "  explained by the page layout: every key is written " + std::to_string(std::abs(shift)) +
                " slot(s) " + (shift > 0 ? "after" : "before") + " the one its page table entry names\n";
        moved = true;
        break;
      }
    }
    const bool has_scales = ref::scale_bytes_per_head(recipe.key_quant.format) > 0;
    for (int shift : {1, -1}) {
      if (!moved && has_scales && scales_on_other_page(layout, b, expected, shift) == actual) {
        text += std::string("  explained by the page layout: every key's values are in the slot its page table entry "
                            "names and its scale in the same slot of the ") +
                (shift > 0 ? "next" : "previous") + " page of the cache (physical page " + (shift > 0 ? "+" : "-") +
                " 1)\n";
        moved = true;
      }
    }
    if (fields.empty() && !moved) text += "  no single recipe field, slot shift or scale page shift explains it\n";
    key["diagnosis"] = text;
    key["differing_bytes"] = {{"values", v.value_mismatches},
                              {"scales", v.scale_mismatches},
                              {"untouched_region", v.untouched_region_writes}};
    key["nan_codes"] = v.nan_codes;
    report.text += text;
  }
  key["pass"] = key_ok;
  key["tokens"] = tokens;
  key["batches"] = batches;
  key["tokens_by_page_size_class"] = tokens_by_class;
  nlohmann::json& table = report.json["coverage"]["key_cache"];
  table = nlohmann::json::array();
  for (const auto& [cell, counts] : coverage) {
    const auto& [page, decode, bf16] = cell;
    table.push_back({{"page_size", page}, {"layout", decode ? "decode" : "prefill"}, {"input", bf16 ? "bf16" : "fp32"},
                     {"format", format}, {"batches", counts.first}, {"tokens", counts.second}});
  }
  std::vector<std::string> gaps;
  if (!missing_sizes.empty()) gaps.push_back("page sizes " + list_text(missing_sizes) + " (not declared by the kernel)");
  if (!caps.bf16_input) gaps.push_back("bf16 input (not declared)");
  if (!caps.fp32_input) gaps.push_back("fp32 input (not declared)");
  if (caps.max_position > 0 && caps.max_position + 1 < kMaxPositions) {
    gaps.push_back("positions past " + std::to_string(caps.max_position) + " (the kernel's limit)");
  }
  for (const std::string& g : gaps) report.json["coverage"]["not_covered"].push_back("key cache: " + g);
  if (key_ok) {
    report.text += "key cache: byte-exact on " + std::to_string(tokens) + " tokens in " + std::to_string(batches) +
                   " batches (page sizes " + list_text(page_sizes) + "; prefill and decode; " +
                   (dtypes.size() == 2 ? "bf16 and fp32" : dtypes[0] ? "bf16" : "fp32") + " input" +
                   (caps.norm_params_bf16 ? "; bf16-exact norm parameters" : "") + ")\n";
  }
  for (const std::string& g : gaps) report.text += "  not covered: " + g + "\n";
  report.pass = report.pass && key_ok;
  ++report.stages_run;
  report.json["stages"].push_back(key);
  return fields;
}

}  // namespace

int64_t verify_peak_bytes(const VerifyConfig& config) {
  constexpr int64_t kInputBytesPerRow = kHeadDim * (4 + 2);       // fp32 values and their bf16 bits
  constexpr int64_t kResultBytesPerRow = 2 * kHeadDim + 8 + 4;    // bf16 values (the widest), scales, weight
  constexpr int64_t kTopKBatchBytes = int64_t{32} * 131072 * 16;  // scores, a row's selection
  const int64_t rows = config.query_tokens * config.num_heads;
  return kVerifyBaseBytes + rows * (kInputBytesPerRow + 3 * kResultBytesPerRow) + kTopKBatchBytes;
}

VerifyReport run_verify(const dev::KernelUnderTest& kernel, const VerifyConfig& config) {
  const ref::Recipe& recipe = config.recipe;
  const dev::KernelCapabilities caps = kernel.capabilities();
  VerifyReport report;
  report.json["stages"] = nlohmann::json::array();
  report.json["coverage"]["not_covered"] = nlohmann::json::array();
  report.json["capabilities"] = {{"key_store", caps.key_store},
                                 {"query_path", caps.query_path},
                                 {"paged_logits", caps.paged_logits},
                                 {"topk", caps.topk},
                                 {"store_formats", caps.store_formats},
                                 {"page_sizes", caps.page_sizes},
                                 {"bf16_input", caps.bf16_input},
                                 {"fp32_input", caps.fp32_input},
                                 {"norm_params_bf16", caps.norm_params_bf16},
                                 {"max_position", caps.max_position},
                                 {"max_tokens", caps.max_tokens},
                                 {"logits_contract", caps.logits_exact_order ? "exact-order" : "bounded"},
                                 {"topk_contract", to_string(caps.topk_contract)},
                                 {"topk_padding", caps.topk_padding == dev::TopKPadding::kMinusOne ? "-1" : "unread"},
                                 {"topk_k", caps.topk_k}};
  std::mt19937_64 rng(config.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const ref::RopeTable rope(recipe.rope.table, kMaxPositions);
  const ref::PagedCacheLayout probe(recipe.key_quant.format, 1);  // validates the format
  const auto key_fields = verify_key_cache(kernel, caps, config, rng, report);

  // ---- Query path -------------------------------------------------------------------
  if (!caps.query_path) {
    report.text += "query path: not provided by the kernel\n";
    verify_scoring(kernel, caps, config, rng, report);
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
    for (int h = 0; h < q.num_heads; ++h) {
      const float w = normal(rng);
      q.wproj.push_back(caps.norm_params_bf16 ? ref::decode_bf16(ref::encode_bf16(w)) : w);
    }
  }
  q.rope_cos.assign(rope.cos(0), rope.cos(0) + static_cast<size_t>(kMaxPositions) * 32);
  q.rope_sin.assign(rope.sin(0), rope.sin(0) + static_cast<size_t>(kMaxPositions) * 32);
  q.recipe = recipe;
  const dev::HostQueryResult got = kernel.query_quant(q);
  // The reference's outputs in the kernel's layout, for a recipe.
  const auto expected_query = [&](const ref::Recipe& r, bool show_progress = false) {
    dev::HostQueryResult e;
    for (int64_t t = 0; t < q.num_tokens; ++t) {
      if (show_progress && config.progress && t % 256 == 0) config.progress("query path", t, q.num_tokens);
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
  const dev::HostQueryResult want = expected_query(recipe, true);
  if (config.progress) config.progress("query path", q.num_tokens, q.num_tokens);
  const auto same_floats = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  nlohmann::json& stages = report.json["stages"];
  bool query_ok = true;
  const int64_t heads = q.num_tokens * q.num_heads;
  const int vb = ref::value_bytes_per_head(recipe.query_quant.format);
  // A kernel may fold the fp8 per-head scale into the head weight and never write it
  // (SGLang's V4 query kernel): every scale byte is then still the 0 the buffer started
  // with, which no fp8 scale has (amax_floor > 0). The weights, judged bit-exact below,
  // carry the scale's value through either weights_fold; fp4 block scales are not folded
  // into anything, so an fp4 kernel must write them.
  const bool scales_folded = recipe.query_quant.format == ref::StorageFormat::kFp8E4m3fn && !got.scales.empty() &&
                             std::all_of(got.scales.begin(), got.scales.end(), [](uint8_t b) { return b == 0; });
  if (scales_folded) {
    report.text += "q scales: not written by the kernel (it folds them into the head weights, checked below)\n";
    report.json["coverage"]["not_covered"].push_back("query path: q scales (not written; folded into the head weights)");
    stages.push_back({{"stage", "q scales"}, {"pass", true}, {"written", false}, {"heads", heads}});
  }
  for (const auto& [name, a, b] : {std::tuple{"q codes", &want.values, &got.values},
                                   std::tuple{"q scales", &want.scales, &got.scales}}) {
    if (scales_folded && std::string(name) == "q scales") continue;
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
    stages.push_back(
        {{"stage", name}, {"pass", v.pass}, {"mismatches", v.mismatches}, {"bytes", v.bytes}, {"heads", heads}});
  }
  const bool weights_ok = same_floats(want.weights, got.weights);
  report.text += weights_ok ? "head weights: bit-exact on " + std::to_string(heads) + " heads\n"
                            : std::string("head weights: MISMATCH\n");
  stages.push_back({{"stage", "head weights"}, {"pass", weights_ok}, {"heads", heads}});
  query_ok = query_ok && weights_ok;
  if (!query_ok) {
    const auto fields = explaining_changes(recipe, [&](const ref::Recipe& r) {
      if (r.query_quant.format != recipe.query_quant.format) return false;
      const dev::HostQueryResult e = expected_query(r);
      return e.values == got.values && (scales_folded || e.scales == got.scales) && same_floats(e.weights, got.weights);
    });
    for (const auto& field : fields) report.text += "  query path explained by one recipe field: " + field.first + "\n";
    if (fields.empty()) report.text += "  no single recipe field explains the query path\n";
  }
  // A field the key cache departs from, where the query path, byte-exact, follows the
  // recipe and would not under the change: the two sides disagree (one-sided RoPE pairing
  // or Hadamard, for instance). Fields the query path does not read are left out, since
  // the change leaves its bytes as they are.
  if (query_ok) {
    for (const auto& [change, variant] : key_fields) {
      const dev::HostQueryResult e = expected_query(variant);
      if (e.values == got.values && (scales_folded || e.scales == got.scales) && same_floats(e.weights, got.weights)) {
        continue;
      }
      report.text += "key and query paths disagree: the key cache follows " + change +
                     ", the query path follows the recipe (byte-exact, and that change would alter its bytes)\n";
      report.json["key_query_disagreement"].push_back(change);
    }
  }
  report.pass = report.pass && query_ok;
  ++report.stages_run;
  verify_scoring(kernel, caps, config, rng, report);
  return report;
}

}  // namespace dsaf::oracle
