// File: verdict_text.h
// Helpers the verdict files (verdict_bytes.cc, verdict_ulp.cc, verdict_metric.cc,
// verdict_determinism.cc) share; not part of the oracle's interface.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

#include "reference/error.h"

namespace dsaf::oracle::verdict_detail {

// printf into a std::string (the reports are small; no fmt dependency here).
[[gnu::format(printf, 1, 2)]] inline std::string printf_string(const char* pattern, ...) {
  va_list args;
  va_start(args, pattern);
  va_list copy;
  va_copy(copy, args);
  const int size = std::vsnprintf(nullptr, 0, pattern, copy);
  va_end(copy);
  std::string out(static_cast<size_t>(size > 0 ? size : 0), '\0');
  if (size > 0) std::vsnprintf(out.data(), out.size() + 1, pattern, args);
  va_end(args);
  return out;
}

// dsaf::Error(kBadInput) "<what>: tensors differ in length (x vs y)" unless the sizes agree.
template <class T>
void check_same_length(const std::vector<T>& x, const std::vector<T>& y, const char* what) {
  if (x.size() != y.size()) {
    throw_bad_input(
        printf_string("%s: tensors differ in length (%zu vs %zu)", what, x.size(), y.size()));
  }
}

}  // namespace dsaf::oracle::verdict_detail
