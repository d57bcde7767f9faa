// File: results_io.h
// The one writer of result files: sweep and needle results (sweep.h, needle.h) as JSON
// and CSV, and selftest results (selftest.h) as JSON. scripts/report.py and the tests
// read these files: keys, their order (alphabetical, nlohmann::json's), numbers and CSV
// columns are a format; change them on purpose only.
//
//   sweep.json   kind, topk, queries_per_context_and_seed, query_positions,
//                score_ulp_histogram (what the rows' histograms mean), seeds, page_size,
//                activations, rows [{recipe, context, [variant_of, stage,] metrics
//                {recall, jaccard, tie_aware_recall, value_recall, mass_recall,
//                kendall_tau, page_recall: {mean, p1, p50, worst}, threshold_valid_fraction,
//                changed_histogram, rows}, score_ulp_histogram}], attribution [{recipe,
//                context, stage, recall_loss, recall_loss_with_stage_exact, accounted}],
//                and `command` when one is given
//   sweep.csv    a row per sweep row: recipe, context, variant_of, stage, recall mean /
//                p1 / worst, the other metrics' means, threshold_valid_fraction
//   needle.json  kind, topk, query, depths, margins_in_sigma, trials, activations,
//                summary [NeedleSummaryRow], cases [NeedleCase: recipes keyed by name
//                when reachable], and `command` when one is given
//   needle.csv   a row per summary row: recipe, context, margin_sigma, cases, retention,
//                rank_p50, rank_worst
//   selftest     [{check, oracle, cases, mismatches, skipped, note, seconds}]
// Shard files of sharded studies are written with write_text_file; their content is
// shard_files.h's.
// Numbers are written as nlohmann::json and fmt write them (shortest round-trip form).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracle/needle.h"
#include "oracle/selftest.h"
#include "oracle/sweep.h"

namespace dsaf::oracle {

// `command` (the command line that produced the result) is added as "command" unless
// empty.
nlohmann::json sweep_to_json(const SweepResult& result, const std::string& command = "");
std::string sweep_to_csv(const SweepResult& result);
nlohmann::json needle_to_json(const NeedleResult& result, const std::string& command = "");
std::string needle_to_csv(const NeedleResult& result);
nlohmann::json selftest_to_json(const std::vector<SelftestCheck>& checks);

// The text of a JSON result file: dump(2) and a newline.
std::string json_file_text(const nlohmann::json& j);

// Writes `text` to `path`; dsaf::Error(kEnvironment) "cannot write '<path>'" on failure.
// Atomic: a temp file beside `path`, written in full and fsynced, then renamed over it; on
// failure `path` is untouched, no temp is left, and the Error names the system's reason.
// The sweep / needle writers write both of their files or neither.
void write_text_file(const std::filesystem::path& path, const std::string& text);

// dir/sweep.json and dir/sweep.csv (dir must exist); dir/needle.json and dir/needle.csv.
void write_sweep_files(const std::filesystem::path& dir, const SweepResult& result,
                       const std::string& command);
void write_needle_files(const std::filesystem::path& dir, const NeedleResult& result,
                        const std::string& command);

}  // namespace dsaf::oracle
