// File: parallel.h
// parallel_for(n, threads, body): runs body(begin, end) on contiguous chunks of [0, n)
// on up to `threads` std::threads (the calling thread takes the first chunk). Results
// must not depend on the split: bodies write disjoint outputs.
// index_scores(query, keys, n, accum, threads): ref::index_scores of keys [0, n) over key
// ranges on threads — the same values, since each key's score depends on that key alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

#include "reference/score.h"

namespace dsaf::oracle {

template <class Body>
void parallel_for(int64_t n, int threads, Body body) {
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  if (threads == 1) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::thread> pool;
  const auto run = [&](int t) {
    try {
      body(n * t / threads, n * (t + 1) / threads);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  for (int t = 1; t < threads; ++t) pool.emplace_back(run, t);
  run(0);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Key ranges of at least this many keys a thread: a range costs a thread start and an
// allocation, a key 2 x heads x 128 multiply-adds.
inline constexpr int64_t kMinKeysPerThread = 4096;

inline std::vector<double> index_scores(const ref::PreparedQuery& query, const ref::KeyMatrix& keys, int64_t n,
                                        ref::ScoreAccum accum, int threads) {
  std::vector<double> out(static_cast<size_t>(std::max<int64_t>(0, n)));
  const int64_t ranges = std::min<int64_t>(std::max(1, threads), std::max<int64_t>(1, n / kMinKeysPerThread));
  parallel_for(ranges, static_cast<int>(ranges), [&](int64_t first_range, int64_t end_range) {
    const int64_t begin = n * first_range / ranges, end = n * end_range / ranges;
    const std::vector<double> part = ref::index_scores(query, keys, begin, end, accum);
    std::copy(part.begin(), part.end(), out.begin() + begin);
  });
  return out;
}

}  // namespace dsaf::oracle
