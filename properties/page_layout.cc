// File: page_layout.cc — layout and activation generators (page_layout.h).
#include "properties/page_layout.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace dsaf::properties {

int64_t PagedSequences::tokens() const { return std::accumulate(seq_lens.begin(), seq_lens.end(), int64_t{0}); }

int64_t PagedSequences::used_pages() const {
  int64_t pages = 0;
  for (int64_t len : seq_lens) pages += (len + page_size - 1) / page_size;
  return pages;
}

std::string PagedSequences::describe() const {
  std::string out = "page size " + std::to_string(page_size) + ", " + std::to_string(num_pages) + " pages;";
  for (size_t s = 0; s < seq_lens.size(); ++s) {
    out += " seq " + std::to_string(s) + ": " + std::to_string(seq_lens[s]) + " tokens, pages [";
    for (size_t i = 0; i < page_tables[s].size(); ++i) out += (i ? "," : "") + std::to_string(page_tables[s][i]);
    out += "];";
  }
  return out;
}

rc::Gen<PagedSequences> gen_paged_sequences(int max_seqs, int max_len, bool boundary_lengths,
                                            std::vector<int> page_sizes) {
  return rc::gen::exec([=] {
    PagedSequences l;
    // Shrinks toward k = 0, i.e. pages of 8 tokens (2^3), then walks 16..256, 1, 2, 4; or
    // toward the first of page_sizes.
    l.page_size = page_sizes.empty() ? 1 << ((*rc::gen::inRange(0, 9) + 3) % 9) : *rc::gen::elementOf(page_sizes);
    const int seqs = *rc::gen::inRange(1, max_seqs + 1);
    for (int s = 0; s < seqs; ++s) {
      if (!boundary_lengths) {
        l.seq_lens.push_back(*rc::gen::inRange<int64_t>(1, max_len + 1));
        continue;
      }
      // A whole number of pages, or one token either side of it.
      const int64_t pages = *rc::gen::inRange<int64_t>(1, std::max<int64_t>(2, max_len / l.page_size + 1));
      l.seq_lens.push_back(std::clamp<int64_t>(pages * l.page_size + *rc::gen::element(0, -1, 1), 1, max_len));
    }
    const int spare = *rc::gen::inRange(0, 4);
    l.num_pages = l.used_pages() + spare;
    // Page order from generated sort keys: all-equal keys (the shrink target) keep the
    // identity order under the stable sort.
    const auto keys = *rc::gen::container<std::vector<int>>(static_cast<size_t>(l.num_pages), rc::gen::inRange(0, 1000));
    std::vector<int32_t> pool(l.num_pages);
    std::iota(pool.begin(), pool.end(), 0);
    std::stable_sort(pool.begin(), pool.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
    size_t next = 0;
    for (int64_t len : l.seq_lens) {
      std::vector<int32_t> table;
      for (int64_t p = 0; p < (len + l.page_size - 1) / l.page_size; ++p) table.push_back(pool[next++]);
      l.page_tables.push_back(table);
    }
    return l;
  });
}

rc::Gen<std::vector<float>> gen_activation_row() {
  return rc::gen::exec([] {
    const auto seed = *rc::gen::inRange<uint32_t>(0, 1u << 30);
    const int outliers = *rc::gen::inRange(0, 5);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(128);
    for (float& v : row) v = normal(rng);
    for (int o = 0; o < outliers; ++o) row[(37 * o + 5) % 128] *= 20.0f + 20.0f * o;
    return row;
  });
}

}  // namespace dsaf::properties
