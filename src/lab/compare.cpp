// Paired A/B comparison of JSON-lines runs: parsing, per-metric statistics, Markdown/JSON reports.
#include "lab/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/mapped_file.h"

namespace weft::lab {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr char kRepeatField[] = "repeat";
// z_0.975 (two-sided 95%) and z_0.975 + z_0.80 (80% power): see compare.h.
constexpr double kZ95 = 1.959963984540054;
constexpr double kMdeFactor = 2.8;

std::string line_prefix(const std::string& name, int line) {
  return name + ":" + std::to_string(line) + ": ";
}

Result<std::string> task_name(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  return Status::error("task key must be a string or an integer, got " + v.dump());
}

Result<int64_t> repeat_index(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return int64_t(v.get<uint64_t>());
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d >= 0 && d == std::floor(d) && d < 9e15) return int64_t(d);
  }
  return Status::error("\"repeat\" must be a non-negative integer, got " + v.dump());
}

std::string fmt(double v, const char* spec = "%.4g") {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

// Metric names go into a Markdown table cell, where a bare '|' would split the cell.
std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

double mean_of(const std::map<int64_t, double>& repeats) {
  double s = 0;
  for (const auto& [r, v] : repeats) s += v;
  return s / double(repeats.size());
}

// The A-vs-A noise floor of one arm (compare.h): |mean(e)| + 1.96 sd(e)/sqrt(m), or NaN.
double arm_noise_floor(const ArmData& arm, const std::string& metric) {
  std::vector<double> e;
  for (const auto& task : arm.task_order) {
    const auto& by_metric = arm.values.at(task);
    auto it = by_metric.find(metric);
    if (it == by_metric.end() || it->second.size() < 2) continue;
    auto first = it->second.begin();
    auto second = std::next(first);
    e.push_back(second->second - first->second);
  }
  if (e.size() < 2) return kNaN;
  return std::fabs(mean(e)) + kZ95 * sample_sd(e) / std::sqrt(double(e.size()));
}

bool repeats_disagree(const ArmData& arm, const std::string& task, const std::string& metric) {
  auto t = arm.values.find(task);
  if (t == arm.values.end()) return false;
  auto m = t->second.find(metric);
  if (m == t->second.end() || m->second.empty()) return false;
  double first = m->second.begin()->second;
  for (const auto& [r, v] : m->second)
    if (v != first) return true;
  return false;
}

bool all_binary(const ArmData& arm, const std::string& metric) {
  for (const auto& [task, by_metric] : arm.values) {
    auto m = by_metric.find(metric);
    if (m == by_metric.end()) continue;
    for (const auto& [r, v] : m->second)
      if (v != 0 && v != 1) return false;
  }
  return true;
}

MetricComparison compare_metric(const ArmData& a, const ArmData& b,
                                const std::vector<std::string>& common, const std::string& metric,
                                const CompareOptions& opts) {
  MetricComparison mc;
  mc.metric = metric;
  std::vector<double> va, vb, d;
  std::vector<std::string> tasks;
  for (const auto& task : common) {
    const auto& ma = a.values.at(task);
    const auto& mb = b.values.at(task);
    auto ia = ma.find(metric), ib = mb.find(metric);
    if (ia == ma.end() || ib == mb.end()) continue;
    va.push_back(mean_of(ia->second));
    vb.push_back(mean_of(ib->second));
    d.push_back(vb.back() - va.back());
    tasks.push_back(task);
  }
  mc.n = int(d.size());
  mc.mean_a = mean(va);
  mc.mean_b = mean(vb);
  mc.diff = mean(d);
  mc.median_diff = median(d);
  mc.ratio = (mc.n > 0 && mc.mean_a != 0) ? mc.mean_b / mc.mean_a : kNaN;
  mc.ci = bootstrap_mean_ci(d, opts.n_resamples, opts.seed);
  WilcoxonResult w = wilcoxon_signed_rank(d);
  mc.p = w.p;
  mc.p_exact = w.exact;
  mc.p_sign = sign_test_p(d);
  double nf_a = arm_noise_floor(a, metric), nf_b = arm_noise_floor(b, metric);
  mc.noise_floor = std::isnan(nf_a) ? nf_b : std::isnan(nf_b) ? nf_a : std::max(nf_a, nf_b);
  mc.mde = mc.n >= 2 ? kMdeFactor * sample_sd(d) / std::sqrt(double(mc.n)) : kNaN;

  mc.binary = all_binary(a, metric) && all_binary(b, metric);
  if (mc.binary) {
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (va[i] != vb[i]) {
        mc.flips.push_back(tasks[i]);
        mc.flip_values.emplace_back(va[i], vb[i]);
      }
    }
    std::set<std::string> seen;
    for (const auto* arm : {&a, &b}) {
      for (const auto& task : arm->task_order) {
        if (seen.count(task)) continue;
        if (repeats_disagree(a, task, metric) || repeats_disagree(b, task, metric)) {
          mc.knife_edge.push_back(task);
          seen.insert(task);
        }
      }
    }
  }

  if (mc.n < 2) {
    mc.reasons.push_back("only " + std::to_string(mc.n) +
                         " task(s) measured in both arms; at least 2 are needed");
  } else {
    if (!mc.ci.excludes_zero())
      mc.reasons.push_back("the 95% CI of the difference [" + fmt(mc.ci.lo) + ", " +
                           fmt(mc.ci.hi) + "] includes 0");
    if (!std::isnan(mc.noise_floor) && !(std::fabs(mc.diff) > mc.noise_floor))
      mc.reasons.push_back("|diff| " + fmt(std::fabs(mc.diff)) +
                           " does not exceed the A-vs-A noise floor " + fmt(mc.noise_floor));
  }
  mc.resolved = mc.reasons.empty();
  return mc;
}

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

Result<ArmData> parse_arm(std::string_view text, const std::string& name, const std::string& key) {
  ArmData arm;
  arm.name = name;
  std::map<std::string, std::set<int64_t>> seen_repeats;
  std::set<std::string> numeric_seen;
  int line_no = 0;
  size_t pos = 0;
  int records = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json rec;
    try {
      rec = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e999
      return Status::error(line_prefix(name, line_no) + "malformed JSON: " + e.what());
    }
    if (!rec.is_object())
      return Status::error(line_prefix(name, line_no) + "expected a JSON object per line");
    auto key_it = rec.find(key);
    if (key_it == rec.end() || key_it->is_null())
      return Status::error(line_prefix(name, line_no) + "missing task key \"" + key + "\"");
    Result<std::string> task = task_name(*key_it);
    if (!task.ok()) return task.status().with_context(name + ":" + std::to_string(line_no));

    auto& repeats = seen_repeats[*task];
    int64_t repeat = int64_t(repeats.size());
    auto rep_it = rec.find(kRepeatField);
    if (key != kRepeatField && rep_it != rec.end() && !rep_it->is_null()) {
      Result<int64_t> r = repeat_index(*rep_it);
      if (!r.ok()) return r.status().with_context(name + ":" + std::to_string(line_no));
      repeat = *r;
    }
    if (!repeats.insert(repeat).second)
      return Status::error(line_prefix(name, line_no) + "duplicate record for task \"" + *task +
                           "\" repeat " + std::to_string(repeat));
    if (!arm.values.count(*task)) arm.task_order.push_back(*task);
    auto& by_metric = arm.values[*task];

    for (const auto& [field, v] : rec.items()) {
      if (field == key || field == kRepeatField || v.is_null()) continue;
      if (v.is_number() || v.is_boolean()) {
        double x = v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
        by_metric[field][repeat] = x;
        if (numeric_seen.insert(field).second) arm.numeric_fields.push_back(field);
      } else if (!arm.non_numeric_line.count(field)) {
        arm.non_numeric_line[field] = line_no;
      }
    }
    ++records;
  }
  if (records == 0) return Status::error(name + ": no records");
  return arm;
}

Result<ArmData> load_arm(const std::string& path, const std::string& key) {
  Result<std::string> text = read_text_file(path);
  if (!text.ok()) return text.status();
  return parse_arm(*text, path, key);
}

Result<CompareReport> compare_arms(const ArmData& a, const ArmData& b,
                                   const CompareOptions& opts) {
  CompareReport rep;
  rep.name_a = a.name;
  rep.name_b = b.name;
  rep.key = opts.key;
  rep.seed = opts.seed;
  rep.n_resamples = opts.n_resamples;

  std::vector<std::string> common;
  for (const auto& t : a.task_order) {
    if (b.values.count(t))
      common.push_back(t);
    else
      rep.unpaired.push_back(t);
  }
  for (const auto& t : b.task_order)
    if (!a.values.count(t)) rep.unpaired.push_back(t);
  if (common.empty())
    return Status::error("no common tasks between " + a.name + " and " + b.name + " (key \"" +
                         opts.key + "\")");
  rep.n_tasks = int(common.size());

  auto numeric_in = [](const ArmData& arm, const std::string& f) {
    return std::find(arm.numeric_fields.begin(), arm.numeric_fields.end(), f) !=
           arm.numeric_fields.end();
  };
  std::vector<std::string> metrics;
  if (opts.metrics.empty()) {
    for (const auto& f : a.numeric_fields)
      if (numeric_in(b, f) && !a.non_numeric_line.count(f) && !b.non_numeric_line.count(f))
        metrics.push_back(f);
    if (metrics.empty())
      return Status::error("no numeric metric is present in both " + a.name + " and " + b.name);
  } else {
    for (const auto& m : opts.metrics) {
      if (std::find(metrics.begin(), metrics.end(), m) != metrics.end()) continue;
      for (const auto* arm : {&a, &b}) {
        auto bad = arm->non_numeric_line.find(m);
        if (bad != arm->non_numeric_line.end())
          return Status::error(line_prefix(arm->name, bad->second) + "metric \"" + m +
                               "\" is not a number");
        if (!numeric_in(*arm, m))
          return Status::error("metric \"" + m + "\" not found in " + arm->name);
      }
      metrics.push_back(m);
    }
  }
  for (const auto& m : metrics) rep.metrics.push_back(compare_metric(a, b, common, m, opts));
  return rep;
}

Result<CompareReport> compare_files(const std::string& path_a, const std::string& path_b,
                                    const CompareOptions& opts) {
  Result<ArmData> a = load_arm(path_a, opts.key);
  if (!a.ok()) return a.status();
  Result<ArmData> b = load_arm(path_b, opts.key);
  if (!b.ok()) return b.status();
  return compare_arms(*a, *b, opts);
}

std::string report_markdown(const CompareReport& r) {
  std::string md;
  md += "# weft compare: A = `" + r.name_a + "`, B = `" + r.name_b + "`\n\n";
  md += "Paired tasks: " + std::to_string(r.n_tasks) + " (key `" + r.key + "`)";
  if (r.unpaired.empty())
    md += "; every task is in both files.\n\n";
  else
    md += "; unpaired (ignored): " + join(r.unpaired, ", ") + ".\n\n";
  md += "Differences are B − A, per task after averaging repeats. CI: percentile bootstrap 95% "
        "of the mean difference (" + std::to_string(r.n_resamples) + " resamples, seed " +
        std::to_string(r.seed) + "). p: Wilcoxon signed-rank; sign: exact sign test. Noise "
        "floor: A-vs-A repeat spread. MDE: 2.8 × SE (80% power, α = 0.05).\n\n";
  md += "| metric | n | mean A | mean B | diff | median diff | B/A | 95% CI | p | p sign | "
        "noise floor | MDE | verdict |\n";
  md += "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|\n";
  for (const auto& m : r.metrics) {
    md += "| " + md_cell(m.metric) + " | " + std::to_string(m.n) + " | " + fmt(m.mean_a) + " | " +
          fmt(m.mean_b) + " | " + fmt(m.diff, "%+.4g") + " | " + fmt(m.median_diff, "%+.4g") +
          " | " + fmt(m.ratio) + " | [" + fmt(m.ci.lo) + ", " + fmt(m.ci.hi) + "] | " +
          fmt(m.p, "%.3g") + " | " + fmt(m.p_sign, "%.3g") + " | " + fmt(m.noise_floor) + " | " +
          fmt(m.mde) + " | " + (m.resolved ? "resolved" : "cannot resolve") + " |\n";
  }
  md += "\n";
  for (const auto& m : r.metrics) {
    md += "## " + m.metric + "\n\n";
    if (m.resolved) {
      md += "- resolved: B − A = " + fmt(m.diff, "%+.4g") + " (95% CI [" + fmt(m.ci.lo) + ", " +
            fmt(m.ci.hi) + "], Wilcoxon p = " + fmt(m.p, "%.3g") + ")";
      md += std::isnan(m.noise_floor) ? "; noise floor not measured (no repeats).\n"
                                      : ", above the noise floor " + fmt(m.noise_floor) + ".\n";
    } else {
      md += "- cannot resolve: " + join(m.reasons, "; ") + ".\n";
    }
    if (m.n >= 2 && std::isfinite(m.mde) && std::fabs(m.diff) < m.mde)
      md += "- the observed |diff| is below the design's MDE " + fmt(m.mde) +
            ": more tasks or repeats are needed to detect an effect this small.\n";
    if (m.binary) {
      if (m.flips.empty()) {
        md += "- flips: none.\n";
      } else {
        md += "- flips (" + std::to_string(m.flips.size()) + "):";
        for (size_t i = 0; i < m.flips.size(); ++i)
          md += std::string(i ? "," : "") + " " + m.flips[i] + " (" +
                fmt(m.flip_values[i].first) + " → " + fmt(m.flip_values[i].second) + ")";
        md += "\n";
      }
      md += "- knife-edge (repeats of one arm disagree): " +
            (m.knife_edge.empty() ? std::string("none") : join(m.knife_edge, ", ")) + ".\n";
    }
    md += "\n";
  }
  return md;
}

nlohmann::json report_json(const CompareReport& r) {
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& m : r.metrics) {
    nlohmann::json j;
    j["n"] = m.n;
    j["mean_a"] = num(m.mean_a);
    j["mean_b"] = num(m.mean_b);
    j["diff"] = num(m.diff);
    j["median_diff"] = num(m.median_diff);
    j["ratio"] = num(m.ratio);
    j["ci"] = {num(m.ci.lo), num(m.ci.hi)};
    j["p"] = num(m.p);
    j["p_exact"] = m.p_exact;
    j["p_sign"] = num(m.p_sign);
    j["noise_floor"] = num(m.noise_floor);
    j["mde"] = num(m.mde);
    j["resolved"] = m.resolved;
    j["reasons"] = m.reasons;
    j["binary"] = m.binary;
    j["flips"] = m.flips;
    j["knife_edge"] = m.knife_edge;
    metrics[m.metric] = j;
  }
  return {{"metrics", metrics},
          {"n_tasks", r.n_tasks},
          {"unpaired", r.unpaired},
          {"seed", r.seed},
          {"n_resamples", r.n_resamples}};
}

}  // namespace weft::lab
