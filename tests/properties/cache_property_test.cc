// Properties of the paged index-K cache over generated layouts and activations.
#include <algorithm>
#include <map>
#include <numeric>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include "properties/page_layout.h"
#include "properties/reference_cache.h"
#include "reference/score.h"
#include "reference/topk.h"

namespace dsaf::properties {
namespace {

KeyInputs gen_inputs(int64_t tokens) {
  KeyInputs in;
  for (int64_t t = 0; t < tokens; ++t) in.rows.push_back(*gen_activation_row());
  return in;
}

const ref::Recipe& gen_preset() {
  static const std::vector<std::string> names = {"dsv32-ref", "dsv32-bf16", "sglang-v4-fp8", "sglang-v4-fp4",
                                                 "dsv4-ref", "vllm-v32"};
  return ref::preset(*rc::gen::elementOf(names));
}

// Every token reads back from the slot its page table names; no other byte changes.
RC_GTEST_PROP(PagedCacheProperty, TokensLandInTheirSlotsAndNothingElseChanges, ()) {
  const PagedSequences l = *gen_paged_sequences(3, 40, *rc::gen::arbitrary<bool>());
  const ref::Recipe& recipe = gen_preset();
  const KeyInputs in = gen_inputs(l.tokens());
  RC_TAG(recipe.name);
  const std::vector<uint8_t> cache = reference_key_cache(recipe, l, in);
  const ref::PagedCacheLayout layout(recipe.key_quant.format, l.page_size);
  std::vector<bool> owned(cache.size(), false);
  for_each_token(l, [&](int s, int64_t pos, int64_t) {
    const ref::CacheLocation at = layout.locate(l.page_tables[s], pos, l.num_pages);
    const ref::StoredHead back = layout.load(cache, at);
    RC_ASSERT(back.value_bytes.size() == static_cast<size_t>(ref::value_bytes_per_head(recipe.key_quant.format)));
    for (int64_t i = 0; i < static_cast<int64_t>(back.value_bytes.size()); ++i) owned[layout.value_offset(at) + i] = true;
    for (int64_t i = 0; i < static_cast<int64_t>(back.scale_bytes.size()); ++i) owned[layout.scale_offset(at) + i] = true;
  });
  for (size_t i = 0; i < cache.size(); ++i) {
    if (!owned[i]) RC_ASSERT(cache[i] == 0xAA);
  }
}

// Scores and top-K of a query over one sequence, read through its page table.
std::vector<int32_t> topk_through_pages(const ref::Recipe& recipe, const PagedSequences& l,
                                        const std::vector<uint8_t>& cache, int seq, const ref::PreparedQuery& q,
                                        int k, std::vector<double>* scores_out = nullptr) {
  const ref::PagedCacheLayout layout(recipe.key_quant.format, l.page_size);
  ref::KeyMatrix keys;
  for (int64_t p = 0; p < l.seq_lens[seq]; ++p) keys.append(layout.load(cache, layout.locate(l.page_tables[seq], p, l.num_pages)));
  const std::vector<double> scores = ref::index_scores(q, keys, keys.num_keys, recipe.score);
  if (scores_out) *scores_out = scores;
  return ref::select_topk(scores, keys.num_keys, k);
}

ref::PreparedQuery gen_query(const ref::Recipe& recipe, int64_t position) {
  const int H = 4;
  std::vector<float> q;
  for (int h = 0; h < H; ++h) {
    const auto row = *gen_activation_row();
    q.insert(q.end(), row.begin(), row.end());
  }
  const std::vector<float> wproj = {1.0f, -0.5f, 0.75f, 2.0f};
  const ref::RopeTable rope(recipe.rope.table, static_cast<int>(position) + 1);
  const ref::QueryOutput out = ref::run_query_path(recipe, q.data(), H, wproj.data(), static_cast<int>(position), rope);
  return ref::prepare_query(out.heads, out.weights);
}

// Metamorphic: moving physical pages (and updating the page tables) changes no score and
// no top-K; neither does adding other sequences to the batch (batch invariance).
RC_GTEST_PROP(PagedCacheProperty, PagePermutationAndOtherSequencesChangeNoScore, ()) {
  const PagedSequences l = *gen_paged_sequences(3, 60, *rc::gen::arbitrary<bool>());
  const ref::Recipe& recipe = gen_preset();
  const KeyInputs in = gen_inputs(l.tokens());
  const std::vector<uint8_t> cache = reference_key_cache(recipe, l, in);
  const ref::PreparedQuery q = gen_query(recipe, l.seq_lens[0] - 1);
  std::vector<double> scores;
  const std::vector<int32_t> top = topk_through_pages(recipe, l, cache, 0, q, 16, &scores);

  // Permute physical pages.
  PagedSequences moved = l;
  std::vector<int32_t> perm(l.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  const auto keys = *rc::gen::container<std::vector<int>>(perm.size(), rc::gen::arbitrary<int>());
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  for (auto& table : moved.page_tables) {
    for (int32_t& p : table) p = perm[p];
  }
  const std::vector<uint8_t> moved_cache = reference_key_cache(recipe, moved, in);
  std::vector<double> moved_scores;
  RC_ASSERT(topk_through_pages(recipe, moved, moved_cache, 0, q, 16, &moved_scores) == top);
  RC_ASSERT(moved_scores == scores);

  // Sequence 0 alone in a batch of its own.
  PagedSequences alone;
  alone.page_size = l.page_size;
  alone.seq_lens = {l.seq_lens[0]};
  alone.page_tables = {l.page_tables[0]};
  alone.num_pages = l.num_pages;
  KeyInputs alone_in;
  alone_in.rows.assign(in.rows.begin(), in.rows.begin() + l.seq_lens[0]);
  std::vector<double> alone_scores;
  RC_ASSERT(topk_through_pages(recipe, alone, reference_key_cache(recipe, alone, alone_in), 0, q, 16, &alone_scores) == top);
  RC_ASSERT(alone_scores == scores);
}

// Stateful: append / evict / reuse pages against a model that remembers what each live
// (sequence, position) stored. The cache must always read back the model's bytes.
struct CacheModel {
  std::map<std::pair<int, int64_t>, std::vector<uint8_t>> stored;  // (seq, pos) -> value+scale bytes
  std::map<int, std::vector<int32_t>> tables;                      // live sequences
  std::vector<int32_t> free_pages;
};

struct CacheSut {
  ref::PagedCacheLayout layout{ref::StorageFormat::kFp8E4m3fn, 4};
  std::vector<uint8_t> cache = std::vector<uint8_t>(16 * layout.page_bytes(), 0);
  std::map<int, int64_t> lens;
};

std::vector<uint8_t> bytes_of(const ref::StoredHead& h) {
  std::vector<uint8_t> b = h.value_bytes;
  b.insert(b.end(), h.scale_bytes.begin(), h.scale_bytes.end());
  return b;
}

struct Append : rc::state::Command<CacheModel, CacheSut> {
  int seq = *rc::gen::inRange(0, 3);
  std::vector<float> row = *gen_activation_row();
  void checkPreconditions(const CacheModel& m) const override {
    const auto it = m.tables.find(seq);
    int64_t len = 0;
    for (const auto& [key, value] : m.stored) len += key.first == seq;
    const bool needs_page = len % 4 == 0;
    RC_PRE(!needs_page || !m.free_pages.empty());
    (void)it;
  }
  ref::StoredHead head(int64_t pos) const {
    static const ref::RopeTable rope(ref::preset("sglang-v4-fp8").rope.table, 1024);
    std::vector<float> ones(128, 1.0f);
    return ref::run_key_path(ref::preset("sglang-v4-fp8"), row.data(), static_cast<int>(pos), {ones.data(), nullptr}, rope);
  }
  void apply(CacheModel& m) const override {
    int64_t len = 0;
    for (const auto& [key, value] : m.stored) len += key.first == seq;
    if (len % 4 == 0) {
      m.tables[seq].push_back(m.free_pages.back());
      m.free_pages.pop_back();
    }
    m.stored[{seq, len}] = bytes_of(head(len));
  }
  void run(const CacheModel& m, CacheSut& sut) const override {
    int64_t& len = sut.lens[seq];
    CacheModel next = m;
    apply(next);
    sut.layout.store(sut.cache, sut.layout.locate(next.tables.at(seq), len, 16), head(len));
    ++len;
    // Every live token reads back as the model says.
    for (const auto& [key, bytes] : next.stored) {
      RC_ASSERT(bytes_of(sut.layout.load(sut.cache, sut.layout.locate(next.tables.at(key.first), key.second, 16))) == bytes);
    }
  }
  void show(std::ostream& os) const override { os << "Append(seq " << seq << ")"; }
};

struct Evict : rc::state::Command<CacheModel, CacheSut> {
  int seq = *rc::gen::inRange(0, 3);
  void checkPreconditions(const CacheModel& m) const override { RC_PRE(m.tables.count(seq) == 1); }
  void apply(CacheModel& m) const override {
    for (int32_t p : m.tables.at(seq)) m.free_pages.push_back(p);  // pages are reused by later appends
    m.tables.erase(seq);
    for (auto it = m.stored.begin(); it != m.stored.end();) it = it->first.first == seq ? m.stored.erase(it) : std::next(it);
  }
  void run(const CacheModel&, CacheSut& sut) const override { sut.lens[seq] = 0; }
  void show(std::ostream& os) const override { os << "Evict(seq " << seq << ")"; }
};

RC_GTEST_PROP(PagedCacheProperty, AppendEvictReuseKeepsTheCacheEqualToTheModel, ()) {
  CacheModel model;
  for (int32_t p = 15; p >= 0; --p) model.free_pages.push_back(p);
  CacheSut sut;
  rc::state::check(model, sut, rc::state::gen::execOneOfWithArgs<Append, Evict>());
}

}  // namespace
}  // namespace dsaf::properties
