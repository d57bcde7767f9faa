// File: page_table_input.h
// The byte form of a paged-cache layout case for fuzz_page_table, shared with the seed
// generator (make_seeds.cc) so both read and write the same format. Little-endian:
//   u8   format        StorageFormat, taken modulo 6 (kNone .. kFp4SimulatedBf16)
//   i32  page_size     passed as is to PagedCacheLayout (validates: power of two, 1..256)
//   i64  num_pages     passed as is to locate (the page count the table may name)
//   u8   cache_pages   pages actually allocated, modulo kMaxCachePages + 1
//   i8   cache_slack   bytes added to (or, negative, taken from) that allocation
//   u8   num_seqs      modulo kMaxSeqs + 1; then per sequence:
//     i64  seq_len     positions 0 .. seq_len-1 are located until locate rejects one
//     u8   table_len   then table_len x i32 page-table entries
//   then, to the end: probes of (u8 sequence modulo num_seqs, i64 position)
// A read past the end yields zeros, so every byte string decodes.
#pragma once

#include <cstdint>
#include <vector>

#include "fuzz/byte_reader.h"

namespace dsaf::fuzz {

inline constexpr int kMaxCachePages = 8;
inline constexpr int kMaxSeqs = 4;

struct PageTableCase {
  struct Sequence {
    int64_t seq_len = 0;
    std::vector<int32_t> table;
  };
  struct Probe {
    uint8_t seq = 0;
    int64_t pos = 0;
  };
  uint8_t format = 0;
  int32_t page_size = 0;
  int64_t num_pages = 0;
  uint8_t cache_pages = 0;
  int8_t cache_slack = 0;
  std::vector<Sequence> seqs;
  std::vector<Probe> probes;
};

inline PageTableCase decode_page_table_case(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  PageTableCase c;
  c.format = in.read<uint8_t>() % 6;
  c.page_size = in.read<int32_t>();
  c.num_pages = in.read<int64_t>();
  c.cache_pages = in.read<uint8_t>() % (kMaxCachePages + 1);
  c.cache_slack = in.read<int8_t>();
  const int num_seqs = in.read<uint8_t>() % (kMaxSeqs + 1);
  for (int s = 0; s < num_seqs; ++s) {
    PageTableCase::Sequence seq;
    seq.seq_len = in.read<int64_t>();
    const int table_len = in.read<uint8_t>();
    for (int i = 0; i < table_len; ++i) seq.table.push_back(in.read<int32_t>());
    c.seqs.push_back(seq);
  }
  while (!in.done()) {
    PageTableCase::Probe p;
    p.seq = in.read<uint8_t>();
    p.pos = in.read<int64_t>();
    c.probes.push_back(p);
  }
  return c;
}

// The inverse of decode_page_table_case for in-range fields (for seeds).
inline std::vector<uint8_t> encode_page_table_case(const PageTableCase& c) {
  std::vector<uint8_t> out;
  append_le(out, c.format);
  append_le(out, c.page_size);
  append_le(out, c.num_pages);
  append_le(out, c.cache_pages);
  append_le(out, c.cache_slack);
  append_le(out, static_cast<uint8_t>(c.seqs.size()));
  for (const auto& seq : c.seqs) {
    append_le(out, seq.seq_len);
    append_le(out, static_cast<uint8_t>(seq.table.size()));
    for (int32_t e : seq.table) append_le(out, e);
  }
  for (const auto& p : c.probes) {
    append_le(out, p.seq);
    append_le(out, p.pos);
  }
  return out;
}

}  // namespace dsaf::fuzz
