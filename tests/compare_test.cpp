// Tests of src/lab/compare and `weft compare`: a flaky design must be reported as unresolvable, a
// clearly separated one as resolved, and bad input must fail with a message that says where.
#include "lab/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include "test_util.h"

namespace weft::lab {
namespace {

std::string data_path(const std::string& name) {
  return weft::test::source_dir() + "/tests/data/compare/" + name;
}

const MetricComparison* find_metric(const CompareReport& r, const std::string& name) {
  for (const auto& m : r.metrics)
    if (m.metric == name) return &m;
  return nullptr;
}

// 40 tasks, 2 repeats per arm; B takes 30% less wall time than A, with +-2% multiplicative noise.
std::string separated_arm(bool faster, uint64_t seed) {
  Rng rng(seed);
  std::string out;
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < 40; ++t) {
      double base = 10.0 + t;  // task difficulty, identical in both arms
      double noise = 1 + 0.04 * (rng.uniform() - 0.5);
      double wall = base * (faster ? 0.7 : 1.0) * noise;
      out += "{\"task\": \"task" + std::to_string(t) + "\", \"repeat\": " + std::to_string(r) +
             ", \"wall_s\": " + std::to_string(wall) + "}\n";
    }
  }
  return out;
}

TEST(Compare, FlakyDesignCannotResolve) {
  Result<CompareReport> r = compare_files(data_path("flaky_a.jsonl"), data_path("flaky_b.jsonl"),
                                          CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->n_tasks, 5);
  EXPECT_TRUE(r->unpaired.empty());
  // Default metrics: the numeric fields of both files; "model" (a string) and key/repeat are not.
  ASSERT_EQ(r->metrics.size(), 2u);
  const MetricComparison* reward = find_metric(*r, "reward");
  ASSERT_NE(reward, nullptr);
  EXPECT_EQ(reward->n, 5);
  EXPECT_TRUE(reward->binary);
  EXPECT_FALSE(reward->resolved);
  EXPECT_FALSE(reward->reasons.empty());
  // Per-task means: A = 1 1 1 .5 .5, B = 1 1 1 .5 .5 -> no flips, diff 0.
  EXPECT_DOUBLE_EQ(reward->diff, 0.0);
  EXPECT_TRUE(reward->flips.empty());
  EXPECT_EQ(reward->knife_edge, (std::vector<std::string>{"t4", "t5"}));
  // Noise floor of A: e = 0 0 0 -1 1 -> |mean| 0 + 1.96 * sqrt(0.5) / sqrt(5).
  EXPECT_NEAR(reward->noise_floor, 1.959963984540054 * std::sqrt(0.5) / std::sqrt(5.0), 1e-9);
  EXPECT_DOUBLE_EQ(reward->p, 1.0);
  std::string md = report_markdown(*r);
  EXPECT_NE(md.find("cannot resolve"), std::string::npos) << md;
  EXPECT_NE(md.find("knife-edge"), std::string::npos);
  nlohmann::json j = report_json(*r);
  EXPECT_EQ(j["metrics"]["reward"]["resolved"], false);
  EXPECT_EQ(j["n_tasks"], 5);
}

TEST(Compare, SeparatedDesignResolves) {
  Result<ArmData> a = parse_arm(separated_arm(false, 1), "A", "task");
  Result<ArmData> b = parse_arm(separated_arm(true, 2), "B", "task");
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  Result<CompareReport> r = compare_arms(*a, *b, CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const MetricComparison* wall = find_metric(*r, "wall_s");
  ASSERT_NE(wall, nullptr);
  EXPECT_EQ(wall->n, 40);
  EXPECT_TRUE(wall->resolved) << report_markdown(*r);
  EXPECT_LT(wall->ci.hi, 0);
  EXPECT_NEAR(wall->ratio, 0.7, 0.01);
  EXPECT_LT(wall->p, 1e-6);
  EXPECT_LT(wall->p_sign, 1e-6);
  EXPECT_LT(std::fabs(wall->noise_floor), std::fabs(wall->diff));
  EXPECT_GT(wall->mde, 0);
  EXPECT_FALSE(wall->binary);
  EXPECT_TRUE(wall->knife_edge.empty());
  // Same seed, same answer; the seed is part of the report.
  Result<CompareReport> again = compare_arms(*a, *b, CompareOptions{});
  EXPECT_EQ(find_metric(*again, "wall_s")->ci.lo, wall->ci.lo);
}

TEST(Compare, SmallShiftBelowNoiseFloorIsNotResolved) {
  // B is exactly 0.1 higher on every task (CI excludes 0), but two runs of the same arm differ by
  // +-1 per task, so the A-vs-A noise floor (~0.65) swamps the shift.
  std::string a, b;
  for (int t = 0; t < 10; ++t) {
    double e = t % 2 ? 1.0 : -1.0;
    for (int r = 0; r < 2; ++r) {
      double v = 5.0 + t + (r ? e : 0);
      std::string head = "{\"task\": " + std::to_string(t) + ", \"repeat\": " + std::to_string(r);
      a += head + ", \"score\": " + std::to_string(v) + "}\n";
      b += head + ", \"score\": " + std::to_string(v + 0.1) + "}\n";
    }
  }
  Result<CompareReport> r =
      compare_arms(*parse_arm(a, "A", "task"), *parse_arm(b, "B", "task"), CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const MetricComparison& m = r->metrics.at(0);
  EXPECT_TRUE(m.ci.excludes_zero());
  EXPECT_FALSE(m.resolved);
  ASSERT_EQ(m.reasons.size(), 1u);
  EXPECT_NE(m.reasons[0].find("noise floor"), std::string::npos);
}

TEST(Compare, FlipsAndRepeatsWithoutIndexAndUnpaired) {
  // No "repeat" field: the k-th record of a task is repeat k. Booleans count as 0/1.
  std::string a = "{\"task\":\"p\",\"ok\":false}\n{\"task\":\"q\",\"ok\":true}\n"
                  "{\"task\":\"q\",\"ok\":true}\n{\"task\":\"only_a\",\"ok\":true}\n";
  std::string b = "{\"task\":\"p\",\"ok\":true}\n{\"task\":\"q\",\"ok\":true}\n"
                  "{\"task\":\"q\",\"ok\":false}\n";
  Result<CompareReport> r =
      compare_arms(*parse_arm(a, "A", "task"), *parse_arm(b, "B", "task"), CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->unpaired, (std::vector<std::string>{"only_a"}));
  const MetricComparison& m = r->metrics.at(0);
  EXPECT_TRUE(m.binary);
  EXPECT_EQ(m.flips, (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(m.knife_edge, (std::vector<std::string>{"q"}));
}

TEST(Compare, BadInputSaysWhere) {
  CompareOptions opts;
  Result<CompareReport> r = compare_files(data_path("nope.jsonl"), data_path("flaky_b.jsonl"), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nope.jsonl"), std::string::npos);

  r = compare_files(data_path("malformed.jsonl"), data_path("flaky_b.jsonl"), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("malformed.jsonl:2:"), std::string::npos)
      << r.status().message();

  r = compare_files(data_path("missing_key.jsonl"), data_path("flaky_b.jsonl"), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing_key.jsonl:2: missing task key"), std::string::npos)
      << r.status().message();

  r = compare_files(data_path("disjoint.jsonl"), data_path("flaky_b.jsonl"), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no common tasks"), std::string::npos);

  opts.metrics = {"energy_wh"};
  r = compare_files(data_path("flaky_a.jsonl"), data_path("flaky_b.jsonl"), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("energy_wh"), std::string::npos);

  opts.metrics = {"model"};
  r = compare_files(data_path("flaky_a.jsonl"), data_path("flaky_b.jsonl"), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("flaky_a.jsonl:1: metric \"model\" is not a number"),
            std::string::npos)
      << r.status().message();

  Result<ArmData> dup = parse_arm("{\"task\":\"a\",\"repeat\":0}\n{\"task\":\"a\",\"repeat\":0}\n",
                                  "D", "task");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("D:2: duplicate"), std::string::npos);

  // A number beyond double range makes nlohmann throw out_of_range, not parse_error; it used to
  // escape and abort `weft compare` (found by fuzz/compare_fuzz).
  Result<ArmData> huge = parse_arm("{\"task\":\"a\",\"x\":1}\n{\"task\":\"b\",\"x\":2e308}\n", "H", "task");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("H:2: malformed JSON"), std::string::npos)
      << huge.status().message();
}

TEST(CompareCli, BinaryEndToEnd) {
  const std::string bin = weft::test::weft_binary();
  const std::string a = data_path("flaky_a.jsonl"), b = data_path("flaky_b.jsonl");
  std::string out;
  ASSERT_EQ(weft::test::run_command(bin + " compare " + a + " " + b, &out), 0) << out;
  EXPECT_NE(out.find("cannot resolve"), std::string::npos) << out;

  ASSERT_EQ(weft::test::run_command(bin + " compare " + a + " " + b +
                                        " --json --metrics reward,turns --seed 7",
                                    &out),
            0)
      << out;
  nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["n_tasks"], 5);
  EXPECT_EQ(j["metrics"]["reward"]["resolved"], false);
  EXPECT_TRUE(j["metrics"]["turns"]["ci"].is_array());
  EXPECT_EQ(j["metrics"]["reward"]["knife_edge"].size(), 2u);

  // A separated design written to files, with a Markdown report to --out.
  std::string dir = weft::test::temp_dir("compare");
  std::ofstream(dir + "/a.jsonl") << separated_arm(false, 1);
  std::ofstream(dir + "/b.jsonl") << separated_arm(true, 2);
  ASSERT_EQ(weft::test::run_command(bin + " compare " + dir + "/a.jsonl " + dir +
                                        "/b.jsonl --json --out " + dir + "/report.md",
                                    &out),
            0)
      << out;
  j = nlohmann::json::parse(out);
  EXPECT_EQ(j["metrics"]["wall_s"]["resolved"], true);
  std::ifstream md(dir + "/report.md");
  std::string md_text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(md_text.find("resolved"), std::string::npos);

  EXPECT_EQ(weft::test::run_command(bin + " compare --help", &out), 0);
  EXPECT_NE(out.find("--metrics"), std::string::npos);
  EXPECT_EQ(weft::test::run_command(bin + " compare " + a + " " + b + " --bogus", &out), 2);
  EXPECT_NE(out.find("bogus"), std::string::npos) << out;
  EXPECT_EQ(weft::test::run_command(bin + " compare " + a, &out), 2);
  EXPECT_EQ(weft::test::run_command(bin + " compare " + a + " " + data_path("missing.jsonl"), &out),
            1);
  EXPECT_NE(out.find("missing.jsonl"), std::string::npos);
  EXPECT_EQ(weft::test::run_command(bin + " compare " + data_path("malformed.jsonl") + " " + b, &out),
            1);
  EXPECT_NE(out.find(":2:"), std::string::npos) << out;
}

}  // namespace
}  // namespace weft::lab
