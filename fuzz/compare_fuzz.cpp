// Fuzzes the `weft compare` JSON-lines reader (lab::parse_arm) and the paired analysis and
// reports computed from whatever it accepts.
//
// Input: A.jsonl | B.jsonl, cut at kPartSeparator (fuzz_util.h).
#include <cstdint>
#include <cstdlib>

#include "fuzz_util.h"
#include "lab/compare.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts = weft::fuzz::split_parts(data, size, 2);
  auto a = weft::lab::parse_arm(parts[0], "A.jsonl", "task");
  auto b = weft::lab::parse_arm(parts[1], "B.jsonl", "task");
  if (!a.ok() || !b.ok()) return 0;
  weft::lab::CompareOptions opts;
  opts.n_resamples = 200;  // the statistics, not their precision, are under test; keeps inputs fast
  auto report = weft::lab::compare_arms(a.value(), b.value(), opts);
  if (!report.ok()) return 0;
  (void)weft::lab::report_markdown(report.value());
  (void)weft::lab::report_json(report.value()).dump();
  return 0;
}
