// File: page_layout.h
// RapidCheck generators of paged-cache layouts and of indexer input rows.
// Layouts: 1..max_seqs sequences of 1..max_len tokens (with `boundary_lengths`: a whole
// number of pages, or one token either side of it), each with its own page table
// drawn from a shuffled pool with up to 3 spare pages (gaps no sequence uses). Every
// component shrinks toward a small, readable case: one sequence, one token, pages of 8
// tokens, page tables in order.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

namespace dsaf::properties {

struct PagedSequences {
  int page_size = 8;
  std::vector<int64_t> seq_lens;
  std::vector<std::vector<int32_t>> page_tables;
  int64_t num_pages = 0;

  int64_t tokens() const;
  // Pages that hold at least one token.
  int64_t used_pages() const;
  std::string describe() const;
};

// page_sizes: draw the page size from these (default: every power of two 1..256).
rc::Gen<PagedSequences> gen_paged_sequences(int max_seqs, int max_len, bool boundary_lengths = false,
                                            std::vector<int> page_sizes = {});

// RapidCheck prints counterexamples through showValue (found by argument-dependent lookup).
inline void showValue(const PagedSequences& l, std::ostream& os) { os << l.describe(); }

// The page of slot `pos` of sequence `s`, and the offset in it.
inline int32_t page_of(const PagedSequences& l, int s, int64_t pos) { return l.page_tables[s][pos / l.page_size]; }

// A row of 128 indexer inputs: N(0, 1) from a generated seed, with up to 4 outlier channels
// scaled 20-100x (LLM-like activations). Shrinks toward seed 0 and no outliers.
rc::Gen<std::vector<float>> gen_activation_row();

}  // namespace dsaf::properties
