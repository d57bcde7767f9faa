// File: batch_shape.h
// The batch shape of the key-store benchmarks (key_store_bench, peer_bench's key stage):
// `tokens` / L sequences of L positions, L = DSAF_BENCH_SEQ_LEN (default 65,536: 16 long
// prefills of a 1M-token batch). Every launch reads the RoPE table's L rows (256 bytes
// each, 16 MB at 64K; bytes the copy-bandwidth fraction does not count), so shorter
// sequences show how much of the fused kernel's time that costs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace dsaf::bench {

// L, or -1 after saying why on stderr: L must be a power of two from a page to `tokens`.
inline int key_sequence_length(int64_t tokens, int page) {
  const char* text = std::getenv("DSAF_BENCH_SEQ_LEN");
  const long long len = text == nullptr ? 65536 : std::atoll(text);
  if (len < page || len > tokens || (len & (len - 1)) != 0) {
    std::fprintf(stderr, "DSAF_BENCH_SEQ_LEN must be a power of two from %d to %lld\n", page,
                 static_cast<long long>(tokens));
    return -1;
  }
  return static_cast<int>(len);
}

}  // namespace dsaf::bench
