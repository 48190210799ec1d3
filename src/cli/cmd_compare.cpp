// `weft compare A.jsonl B.jsonl`: paired statistics of two runs, as Markdown or JSON (src/lab/compare.h).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "lab/compare.h"

namespace {

std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(pos, end - pos);
    if (!item.empty()) out.push_back(item);
    pos = end + 1;
  }
  return out;
}

int run_compare(int argc, char** argv) {
  CLI::App app{
      "Paired A/B comparison of two JSON-lines runs (one record per task and repeat).\n"
      "Differences are B - A; tasks are paired by the key field, repeats averaged per arm."};
  app.name("weft compare");
  std::string path_a, path_b, metrics_csv, out_path;
  weft::lab::CompareOptions opts;
  bool as_json = false;
  app.add_option("A", path_a, "baseline run (JSON lines)")->required();
  app.add_option("B", path_b, "candidate run (JSON lines)")->required();
  app.add_option("--key", opts.key, "field naming the task")->capture_default_str();
  app.add_option("--metrics", metrics_csv,
                 "comma-separated metrics (default: every numeric field in both files)");
  app.add_option("--seed", opts.seed, "bootstrap seed")->capture_default_str();
  app.add_flag("--json", as_json, "print one JSON object instead of Markdown");
  app.add_option("--out", out_path, "write the Markdown report to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "weft compare: %s\n(see weft compare --help)\n", e.what());
    return 2;
  }
  opts.metrics = split_csv(metrics_csv);
  if (!metrics_csv.empty() && opts.metrics.empty()) {
    std::fprintf(stderr, "weft compare: --metrics names no metric\n");
    return 2;
  }

  weft::Result<weft::lab::CompareReport> report = weft::lab::compare_files(path_a, path_b, opts);
  if (!report.ok()) {
    std::fprintf(stderr, "weft compare: %s\n", report.status().message().c_str());
    return 1;
  }
  std::string md = weft::lab::report_markdown(*report);
  if (!out_path.empty()) {
    std::ofstream f(out_path);
    f << md;
    if (!f.good()) {
      std::fprintf(stderr, "weft compare: cannot write %s\n", out_path.c_str());
      return 1;
    }
  }
  if (as_json) {
    std::printf("%s\n", weft::lab::report_json(*report).dump(2).c_str());
  } else if (out_path.empty()) {
    std::printf("%s", md.c_str());
  } else {
    std::printf("weft compare: wrote %s\n", out_path.c_str());
  }
  return 0;
}

const weft::cli::CommandRegistrar kRegistrar("compare", "paired A/B statistics of two runs",
                                             run_compare);

}  // namespace
