// Paired A/B comparison of two runs (JSON-lines records keyed by task): the engine of `weft compare`.
//
// Input: one JSON object per line, e.g. {"task": "t07", "repeat": 1, "turns": 12, "reward": 1}.
//   * the task key field (default "task") is required; strings or numbers;
//   * "repeat" is an optional non-negative integer; without it, the k-th record of a task in a
//     file is repeat k (0-based). A (task, repeat) pair may appear only once per file;
//   * metrics are numbers (booleans count as 0/1); null or absent means "not measured here".
//
// Analysis of one metric (differences are always B − A):
//   * pairing: each task's repeats are averaged per arm, giving a_t and b_t; the paired tasks are
//     those measured in both arms, d_t = b_t − a_t, n = number of paired tasks;
//   * diff = mean(d), median_diff = median(d), ratio = mean(b)/mean(a) over the paired tasks;
//   * ci = percentile-bootstrap 95% CI of mean(d) (stats.h; 10000 resamples, seeded);
//   * p = Wilcoxon signed-rank p, p_sign = exact sign-test p (stats.h conventions);
//   * noise floor (the A-vs-A yardstick): within one arm, for every task with >= 2 repeats take
//     e_t = x_t(second repeat) − x_t(first repeat) (the two lowest repeat indices). If two runs of
//     the same arm were compared, their mean difference would be mean(e); its plausible size is
//     |mean(e)| + 1.96·sd(e)/sqrt(m) (the far end of a normal 95% interval, m = tasks with
//     repeats). noise_floor = the larger of the two arms' values; it needs m >= 2 in some arm,
//     else it is unknown (NaN / null) and not used. It compares single repeats, while `diff`
//     averages all repeats, so it is deliberately conservative;
//   * mde = 2.8 · sd(d)/sqrt(n): the minimal detectable mean difference with 80% power at
//     two-sided alpha = 0.05 (z_0.975 + z_0.80 = 1.960 + 0.842; e.g. Cohen 1988, ch. 2);
//   * resolved = n >= 2 AND ci excludes 0 AND (noise floor unknown OR |diff| > noise_floor);
//     otherwise `reasons` says why not, in plain words;
//   * 0/1-like metrics (every observed value is 0 or 1): flips = paired tasks whose per-arm mean
//     differs; knife_edge = tasks (either arm) whose repeats within one arm disagree. Both are
//     empty for continuous metrics, where every repeat differs a little.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "lab/stats.h"

namespace weft::lab {

// One file's records, indexed by task and metric.
struct ArmData {
  std::string name;                     // file path or label, for messages
  std::vector<std::string> task_order;  // tasks in order of first appearance
  // task -> metric -> repeat -> value
  std::map<std::string, std::map<std::string, std::map<int64_t, double>>> values;
  std::vector<std::string> numeric_fields;            // in order of first appearance
  std::map<std::string, int> non_numeric_line;        // field -> first line where not a number
};

// Parses JSON-lines text. `name` labels error messages ("B.jsonl:17: ...").
Result<ArmData> parse_arm(std::string_view text, const std::string& name, const std::string& key);
Result<ArmData> load_arm(const std::string& path, const std::string& key);

struct CompareOptions {
  std::string key = "task";
  std::vector<std::string> metrics;  // empty: every numeric field present in both arms
  uint64_t seed = kDefaultSeed;
  int n_resamples = 10000;
};

struct MetricComparison {
  std::string metric;
  int n = 0;
  double mean_a = 0, mean_b = 0;
  double diff = 0, median_diff = 0, ratio = 0;
  Interval ci;
  double p = 1, p_sign = 1;
  bool p_exact = false;
  double noise_floor = 0;  // NaN when unknown
  double mde = 0;          // NaN when n < 2
  bool binary = false;
  bool resolved = false;
  std::vector<std::string> reasons;     // why not resolved
  std::vector<std::string> flips;       // paired tasks whose 0/1 outcome differs between arms
  std::vector<std::pair<double, double>> flip_values;  // (a_t, b_t) for each flip
  std::vector<std::string> knife_edge;  // tasks whose 0/1 outcome differs between repeats
};

struct CompareReport {
  std::string name_a, name_b, key;
  uint64_t seed = 0;
  int n_resamples = 0;
  int n_tasks = 0;                     // tasks present in both arms
  std::vector<std::string> unpaired;   // tasks present in only one arm
  std::vector<MetricComparison> metrics;
};

Result<CompareReport> compare_arms(const ArmData& a, const ArmData& b, const CompareOptions& opts);
Result<CompareReport> compare_files(const std::string& path_a, const std::string& path_b,
                                    const CompareOptions& opts);

std::string report_markdown(const CompareReport& report);
// {"metrics": {name: {...}}, "n_tasks": n, "unpaired": [...]}; non-finite numbers become null.
nlohmann::json report_json(const CompareReport& report);

}  // namespace weft::lab
