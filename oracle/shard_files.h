// File: shard_files.h
// Shard files, written by `sweep --shard i/n` and `needle --shard i/n`, and `merge`, which
// combines a study's shard files into the very result the unsharded study gives
// (docs/sharding.md). results_io.h writes the files; this is their content.
//
// A shard file is one JSON object (on one line):
//   kind     "sweep-shard" | "needle-shard"
//   format   kShardFormat
//   tool     {version, commit}: the build that ran the shard
//   shard    {index, count}
//   command  the study's command line without its --shard: the merged files' command
//   config   everything the results depend on: the recipes (every field), contexts,
//            K, the activations (generator, its seed and parameters; or the fixture, with
//            fixture_sha256 over the sha256 of every dataset the study reads), and
//            sweep: seeds, queries, page_size, attribution, studied [{recipe, variant_of,
//            stage}]; needle: depths, margins, trials, recipe_names
//   units    the shard's units (shard_plan.h) in canonical order with their partial
//            results. sweep: {context, seed, studied: [{rows: {recall, jaccard,
//            tie_aware_recall, threshold_valid, value_recall, mass_recall, kendall_tau,
//            page_recall, changed: a value per query row}, score_ulp_histogram}]};
//            needle: {context, trial, cases: [every NeedleCase field]}
// Doubles are exact: finite ones as nlohmann writes them (the shortest text that reads back
// to the same double), the others as the strings "inf", "-inf", "nan", "-nan". So a merged
// result is reduced from the same bits in the same order as the unsharded one, and writes
// the same bytes whatever the shard count.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracle/needle.h"
#include "oracle/shard_plan.h"
#include "oracle/sweep.h"

namespace dsaf::oracle {

inline constexpr int kShardFormat = 1;

// What a shard file records besides the configuration and the results.
struct ShardOrigin {
  std::string tool_version;    // the dsa-fidelity release
  std::string tool_commit;     // `git describe` of its build ("unknown" outside git)
  std::string command;         // the command line without --shard
  std::string fixture_sha256;  // with a fixture: the digest of what the study reads; else ""
};

// "<study>.shard-<index>-of-<count>.json", e.g. sweep.shard-0-of-3.json.
std::string shard_file_name(const std::string& study, Shard shard);
// The text of a shard file: compact JSON and a newline.
std::string shard_file_text(const nlohmann::json& shard_file);

// The shard file of `units` (run_sweep_units / run_needle_units of the shard's units).
nlohmann::json sweep_shard_json(const SweepConfig& config, Shard shard, const ShardOrigin& origin,
                                const std::vector<SweepUnitResult>& units);
nlohmann::json needle_shard_json(const NeedleConfig& config, Shard shard, const ShardOrigin& origin,
                                 const std::vector<NeedleUnitResult>& units);

// A shard file as read: where it came from (for messages) and its JSON.
struct ShardFile {
  std::string path;
  nlohmann::json json;
};

// "sweep" or "needle", the study of a shard file; dsaf::Error(kBadInput) naming the file
// when it is no shard file.
std::string shard_study(const ShardFile& file);

// The result of a study from all of its shard files, in any order, and the command the
// merged files name (shard 0's). Throws dsaf::Error(kBadInput) naming the file and the
// field when files are of another kind or format, from another build (tool), of another
// configuration or shard count, when a shard is missing or given twice, or when a file's
// units are not those the plan gives its shard.
template <class Result>
struct MergedShards {
  Result result;
  std::string command;
};
MergedShards<SweepResult> merge_sweep_shards(const std::vector<ShardFile>& files);
MergedShards<NeedleResult> merge_needle_shards(const std::vector<ShardFile>& files);

}  // namespace dsaf::oracle
