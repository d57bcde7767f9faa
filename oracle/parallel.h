// File: parallel.h
// parallel_for(n, threads, body): runs body(begin, end) on contiguous chunks of [0, n)
// on up to `threads` std::threads (the calling thread takes the first chunk). Results
// must not depend on the split: bodies write disjoint outputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

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

}  // namespace dsaf::oracle
