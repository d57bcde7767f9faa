// File: results_io.cc — result files of the studies and the selftest (results_io.h).
#include "oracle/results_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "reference/error.h"

namespace dsaf::oracle {
namespace {

nlohmann::json summary_json(const Summary& s) {
  return {{"mean", s.mean}, {"p1", s.p1}, {"p50", s.p50}, {"worst", s.worst}};
}

nlohmann::json aggregate_json(const Aggregate& a) {
  return {{"recall", summary_json(a.recall)},
          {"jaccard", summary_json(a.jaccard)},
          {"tie_aware_recall", summary_json(a.tie_aware_recall)},
          {"value_recall", summary_json(a.value_recall)},
          {"mass_recall", summary_json(a.mass_recall)},
          {"kendall_tau", summary_json(a.kendall_tau)},
          {"page_recall", summary_json(a.page_recall)},
          {"threshold_valid_fraction", a.threshold_valid_fraction},
          {"changed_histogram", a.changed_histogram},
          {"rows", a.recall.rows}};
}

nlohmann::json sweep_row_json(const SweepRow& r) {
  nlohmann::json row = {{"recipe", r.recipe}, {"context", r.context}, {"metrics", aggregate_json(r.metrics)},
                        {"score_ulp_histogram", r.score_ulp_histogram}};
  if (!r.variant_of.empty()) {
    row["variant_of"] = r.variant_of;
    row["stage"] = r.stage;
  }
  return row;
}

// reference_keys only in the planted-fact mode, so that the default files keep their bytes.
nlohmann::json needle_case_json(const NeedleCase& c, bool planted) {
  nlohmann::json record = {{"context", c.context}, {"trial", c.trial}, {"depth", c.depth},
                           {"position", c.position}, {"margin", c.margin}, {"tau", c.tau},
                           {"sigma", c.sigma}, {"model_recipes", c.model_recipes}};
  if (planted) record["reference_keys"] = c.reference_keys;
  record["reachable"] = c.reachable;
  if (!c.reachable) {
    record["best_exact_score_found"] = c.best_exact_score_found;
    record["lowest_exact_score_found"] = c.lowest_exact_score_found;
    return record;
  }
  record["beta"] = c.beta;
  record["needle_exact_score"] = c.needle_exact_score;
  record["achieved_margin"] = c.achieved_margin;
  record["exact_rank"] = c.exact_rank;
  nlohmann::json per_recipe = nlohmann::json::object();
  // Keyed by name: of two outcomes with one name the later one stays.
  for (const NeedleOutcome& o : c.recipes) {
    per_recipe[o.recipe] = {{"rank", o.rank}, {"retained", o.retained}, {"score", o.score}};
  }
  record["recipes"] = per_recipe;
  return record;
}

}  // namespace

nlohmann::json sweep_to_json(const SweepResult& result, const std::string& command) {
  nlohmann::json rows = nlohmann::json::array();
  for (const SweepRow& r : result.rows) rows.push_back(sweep_row_json(r));
  nlohmann::json attribution = nlohmann::json::array();
  for (const StageAttribution& a : result.attribution) {
    attribution.push_back({{"recipe", a.recipe}, {"context", a.context}, {"stage", a.stage},
                           {"recall_loss", a.recall_loss},
                           {"recall_loss_with_stage_exact", a.recall_loss_with_stage_exact},
                           {"accounted", a.accounted}});
  }
  nlohmann::json j = {{"kind", "sweep"},
                      {"topk", result.layout.topk},
                      {"queries_per_context_and_seed", result.layout.queries},
                      {"query_positions", "spread over [n/2, n), causal (keys 0..t)"},
                      {"score_ulp_histogram",
                       "per row set: fp32 ulp distance between the recipe's score and the exact score "
                       "rounded to fp32; bucket 0 = 0 ulp, 1 = 1 ulp, b >= 2 = [2^(b-1), 2^b) ulps"},
                      {"seeds", result.layout.seeds},
                      {"page_size", result.layout.page_size},
                      {"activations", result.layout.activations},
                      {"rows", rows},
                      {"attribution", attribution}};
  if (!result.layout.device.is_null()) j["device"] = result.layout.device;
  if (!command.empty()) j["command"] = command;
  return j;
}

std::string sweep_to_csv(const SweepResult& result) {
  std::string csv = "recipe,context,variant_of,stage,recall_mean,recall_p1,recall_worst,jaccard_mean,"
                    "tie_aware_recall_mean,value_recall_mean,mass_recall_mean,kendall_tau_mean,"
                    "page_recall_mean,threshold_valid_fraction\n";
  for (const SweepRow& r : result.rows) {
    const Aggregate& m = r.metrics;
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.recipe, r.context, r.variant_of,
                       r.variant_of.empty() ? "" : r.stage, m.recall.mean, m.recall.p1, m.recall.worst,
                       m.jaccard.mean, m.tie_aware_recall.mean, m.value_recall.mean, m.mass_recall.mean,
                       m.kendall_tau.mean, m.page_recall.mean, m.threshold_valid_fraction);
  }
  return csv;
}

nlohmann::json needle_to_json(const NeedleResult& result, const std::string& command) {
  nlohmann::json summary = nlohmann::json::array();
  for (const NeedleSummaryRow& s : result.summary) {
    summary.push_back({{"recipe", s.recipe}, {"context", s.context}, {"margin", s.margin},
                       {"cases", s.cases}, {"unreachable", s.unreachable},
                       {"retention", s.retention}, {"rank_p50", s.rank_p50},
                       {"rank_worst", s.rank_worst}});
  }
  nlohmann::json cases = nlohmann::json::array();
  const bool planted = result.layout.reference_context > 0;
  for (const NeedleCase& c : result.cases) cases.push_back(needle_case_json(c, planted));
  nlohmann::json j = {{"kind", "needle"},
                      {"topk", result.layout.topk},
                      {"query", "the last token (t = N - 1), all N keys valid"},
                      {"depths", result.layout.depths},
                      {"margins_in_sigma", result.layout.margins},
                      {"trials", result.layout.trials},
                      {"activations", result.layout.activations},
                      {"summary", summary},
                      {"cases", cases}};
  if (!result.layout.device.is_null()) j["device"] = result.layout.device;
  if (planted) {
    j["reference_context"] = result.layout.reference_context;
    j["margin_reference"] = "the other keys of the query's last reference_context positions (planted fact)";
    j["query"] = "at position N - 1 with the input of token min(reference_context, N) - 1 (planted fact), all N keys valid";
  }
  if (!command.empty()) j["command"] = command;
  return j;
}

std::string needle_to_csv(const NeedleResult& result) {
  std::string csv = "recipe,context,margin_sigma,cases,retention,rank_p50,rank_worst\n";
  for (const NeedleSummaryRow& s : result.summary) {
    csv += fmt::format("{},{},{},{},{},{},{}\n", s.recipe, s.context, s.margin, s.cases, s.retention,
                       s.rank_p50, s.rank_worst);
  }
  return csv;
}

nlohmann::json selftest_to_json(const std::vector<SelftestCheck>& checks) {
  nlohmann::json out = nlohmann::json::array();
  for (const SelftestCheck& c : checks) {
    out.push_back({{"check", c.name}, {"oracle", c.oracle}, {"cases", c.cases},
                   {"mismatches", c.mismatches}, {"skipped", c.skipped}, {"note", c.note},
                   {"seconds", c.seconds}});
  }
  return out;
}

std::string json_file_text(const nlohmann::json& j) { return j.dump(2) + "\n"; }

namespace {

// A text written in full to a temp file beside its destination (mkstemp, write, fsync),
// renamed over it by commit(); removed unless committed.
class PendingText {
 public:
  PendingText(const std::filesystem::path& path, const std::string& text) : path_(path) {
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    std::string pattern = (dir / ("." + path.filename().string() + ".tmp-XXXXXX")).string();
    const int fd = mkstemp(pattern.data());
    if (fd < 0) fail(std::strerror(errno));
    temp_ = pattern;
    fchmod(fd, 0644);  // mkstemp makes 0600
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const std::string why = n < 0 ? std::strerror(errno) : "no progress";
        ::close(fd);
        fail(why);
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      fail(why);
    }
    if (::close(fd) != 0) fail(std::strerror(errno));
  }
  ~PendingText() {
    if (!temp_.empty()) std::remove(temp_.c_str());
  }
  PendingText(const PendingText&) = delete;
  PendingText& operator=(const PendingText&) = delete;
  void commit() {
    if (std::rename(temp_.c_str(), path_.c_str()) != 0) fail(std::strerror(errno));
    temp_.clear();
  }

 private:
  // Also from the constructor, where no destructor will run: the temp goes first.
  [[noreturn]] void fail(const std::string& why) {
    if (!temp_.empty()) std::remove(temp_.c_str());
    temp_.clear();
    throw Error(ErrorKind::kEnvironment, "cannot write '" + path_.string() + "' (" + why + ")");
  }
  std::filesystem::path path_;
  std::string temp_;
};

// Both files or neither: every temp is written before the first rename.
void write_text_files(const std::vector<std::pair<std::filesystem::path, std::string>>& files) {
  std::vector<std::unique_ptr<PendingText>> pending;
  for (const auto& [path, text] : files) pending.push_back(std::make_unique<PendingText>(path, text));
  for (auto& p : pending) p->commit();
}

}  // namespace

void write_text_file(const std::filesystem::path& path, const std::string& text) { write_text_files({{path, text}}); }

void write_sweep_files(const std::filesystem::path& dir, const SweepResult& result,
                       const std::string& command) {
  write_text_files({{dir / "sweep.json", json_file_text(sweep_to_json(result, command))},
                    {dir / "sweep.csv", sweep_to_csv(result)}});
}

void write_needle_files(const std::filesystem::path& dir, const NeedleResult& result,
                        const std::string& command) {
  write_text_files({{dir / "needle.json", json_file_text(needle_to_json(result, command))},
                    {dir / "needle.csv", needle_to_csv(result)}});
}

}  // namespace dsaf::oracle
