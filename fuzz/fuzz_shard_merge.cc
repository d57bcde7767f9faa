// File: fuzz_shard_merge.cc
// libFuzzer target: bytes -> shard files -> what `dsa-fidelity merge` does with them
// (oracle/shard_files.h). The input is up to four shard files, one a line (a shard file is
// one line of JSON); each is parsed with parse_untrusted_json (reference/recipe_json.h,
// the CLI's reader: depth bound, no duplicate names), then shard_study picks the study of
// the first and merge_sweep_shards / merge_needle_shards combine them. Rejection must be a
// dsaf::Error. Accepted files must merge to the same result in any order: the merged
// study's JSON and CSV (results_io.h, what `merge` writes) from the files as given and
// reversed must be the same bytes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/harness.h"
#include "oracle/results_io.h"
#include "oracle/shard_files.h"
#include "reference/error.h"
#include "reference/recipe_json.h"

namespace {

using dsaf::fuzz::property_failed;
using dsaf::oracle::ShardFile;

constexpr size_t kMaxFiles = 4;

// The merged study as `merge` writes it: its JSON file's text, then its CSV.
std::string merged_text(const std::vector<ShardFile>& files) {
  namespace o = dsaf::oracle;
  if (o::shard_study(files.front()) == "sweep") {
    const auto merged = o::merge_sweep_shards(files);
    return o::json_file_text(o::sweep_to_json(merged.result, merged.command)) + o::sweep_to_csv(merged.result);
  }
  const auto merged = o::merge_needle_shards(files);
  return o::json_file_text(o::needle_to_json(merged.result, merged.command)) + o::needle_to_csv(merged.result);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<ShardFile> files;
  std::string text;
  try {
    for (size_t begin = 0; begin < input.size() && files.size() < kMaxFiles;) {
      const size_t end = std::min(input.find('\n', begin), input.size());
      const std::string path = "shard-" + std::to_string(files.size()) + ".json";
      const std::string line = input.substr(begin, end - begin);
      files.push_back({path, dsaf::ref::parse_untrusted_json(line, "merge: '" + path + "'")});
      begin = end + 1;
    }
    if (files.empty()) return 0;
    text = merged_text(files);
  } catch (const dsaf::Error&) {
    return 0;
  }
  const std::vector<ShardFile> reversed(files.rbegin(), files.rend());
  try {
    if (merged_text(reversed) != text) property_failed("the merged study depends on the order of its shard files");
  } catch (const dsaf::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    property_failed("shard files merged in one order are refused in the reverse order");
  }
  return 0;
}
