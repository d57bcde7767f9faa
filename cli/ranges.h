// File: ranges.h
// Command-line value lists. Malformed text throws dsaf::Error (kUsage) naming it.
//   contexts: "2k..64k" = 2048, 4096, ..., 65536 (doubling, both ends included, the upper
//             end must be reached exactly); "4096,8192"; "3000". k = 1024, m = 1024^2.
//   reals:    "0.1..0.9" = 5 evenly spaced values; "0.1..0.9:9" = 9 values; "0.1,0.5".
//   names:    "a,b,c" (no empty names).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsaf::cli {

std::vector<int64_t> parse_contexts(const std::string& text);
std::vector<double> parse_reals(const std::string& text, int default_points = 5);
std::vector<std::string> parse_names(const std::string& text);

}  // namespace dsaf::cli
