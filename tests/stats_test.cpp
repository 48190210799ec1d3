// Tests of src/lab/stats (expected values hand-computed, derivation in the comment, or checked by
// brute-force enumeration of the null distribution) and of the SVG chart writer src/lab/svg_plot.
#include "lab/stats.h"
#include "lab/svg_plot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

namespace weft::lab {
namespace {

TEST(Stats, MeanSdMedianQuantileType7) {
  std::vector<double> x = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(mean(x), 5.0);
  // Sum of squared deviations = 32, n-1 = 7.
  EXPECT_DOUBLE_EQ(sample_sd(x), std::sqrt(32.0 / 7.0));
  std::vector<double> y = {4, 1, 3, 2};  // sorted 1 2 3 4
  EXPECT_DOUBLE_EQ(median(y), 2.5);
  EXPECT_DOUBLE_EQ(quantile(y, 0.25), 1.75);  // h = 3 * 0.25 = 0.75 -> 1 + 0.75 * (2 - 1)
  EXPECT_DOUBLE_EQ(quantile(y, 0.9), 3.7);    // h = 2.7 -> 3 + 0.7 * (4 - 3)
  EXPECT_DOUBLE_EQ(quantile(y, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(quantile(y, 1.0), 4.0);
  std::vector<double> odd = {5, 1, 3};
  EXPECT_DOUBLE_EQ(median(odd), 3.0);
  EXPECT_TRUE(std::isnan(mean(std::vector<double>{})));
  EXPECT_TRUE(std::isnan(sample_sd(std::vector<double>{1.0})));
}

TEST(Stats, Splitmix64MatchesReference) {
  // First output of splitmix64 from state 0, as published with the reference C implementation.
  uint64_t state = 0;
  EXPECT_EQ(splitmix64(&state), 0xe220a8397b1dcdafULL);
}

TEST(Stats, RngIsDeterministicAndUniform) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    uint64_t va = a.next();
    EXPECT_EQ(va, b.next());
    if (va != c.next()) differs = true;
  }
  EXPECT_TRUE(differs);
  Rng r(7);
  std::vector<int> counts(10, 0);
  double sum = 0;
  const int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) {
    uint64_t k = r.below(10);
    ASSERT_LT(k, 10u);
    counts[k]++;
    double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  // Each bucket expects 10000 with sd ~95; 6 sd is a generous bound for a fixed seed.
  for (int c : counts) EXPECT_NEAR(c, 10000, 600);
  EXPECT_NEAR(sum / kDraws, 0.5, 0.01);
}

TEST(Stats, BinomialAndSignTest) {
  EXPECT_DOUBLE_EQ(binomial_half_cdf(1, 10), 11.0 / 1024);
  // 8 wins of 10: 2 * (C(10,0) + C(10,1) + C(10,2)) / 2^10 = 2 * 56 / 1024.
  EXPECT_NEAR(sign_test_p(8, 2), 0.109375, 1e-12);
  EXPECT_NEAR(sign_test_p(2, 8), 0.109375, 1e-12);
  EXPECT_NEAR(sign_test_p(6, 0), 2.0 / 64, 1e-12);
  EXPECT_DOUBLE_EQ(sign_test_p(5, 5), 1.0);
  EXPECT_DOUBLE_EQ(sign_test_p(0, 0), 1.0);
  // Zeros are dropped: 8 positive, 2 negative, 2 zero -> same as 8 of 10.
  std::vector<double> d = {1, 2, 3, 4, 5, 6, 7, 8, -1, -2, 0, 0};
  EXPECT_NEAR(sign_test_p(d), 0.109375, 1e-12);
  // Large n stays finite and sensible: 600 of 1000 is far from 1/2.
  double p = sign_test_p(600, 400);
  EXPECT_GT(p, 0);
  EXPECT_LT(p, 1e-9);
}

// Two-sided exact p by enumerating all 2^n sign assignments of ranks 1..n:
// P(|W+ - mu| >= |w - mu|), which equals 2 min(lower tail, upper tail) for this symmetric law.
double brute_force_wilcoxon_p(const std::vector<double>& d) {
  int n = int(d.size());
  std::vector<std::pair<double, double>> by_abs;
  for (double v : d) by_abs.push_back({std::fabs(v), v});
  std::sort(by_abs.begin(), by_abs.end());
  double w = 0;
  for (int i = 0; i < n; ++i)
    if (by_abs[size_t(i)].second > 0) w += i + 1;
  double mu = n * (n + 1) / 4.0;
  int64_t extreme = 0;
  for (int64_t mask = 0; mask < (int64_t(1) << n); ++mask) {
    double s = 0;
    for (int i = 0; i < n; ++i)
      if (mask >> i & 1) s += i + 1;
    if (std::fabs(s - mu) >= std::fabs(w - mu) - 1e-9) ++extreme;
  }
  return double(extreme) / double(int64_t(1) << n);
}

TEST(Stats, WilcoxonExactHandComputed) {
  // All 5 positive: W+ = 15 is the single most extreme of 32 outcomes on each side: 2/32.
  WilcoxonResult r = wilcoxon_signed_rank(std::vector<double>{1, 2, 3, 4, 5});
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.n, 5);
  EXPECT_DOUBLE_EQ(r.w_plus, 15);
  EXPECT_NEAR(r.p, 0.0625, 1e-12);
  // Rank 1 negative: W+ = 14; P(W+ >= 14) = #{15, 14} = 2/32, two-sided 4/32.
  r = wilcoxon_signed_rank(std::vector<double>{-1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(r.w_plus, 14);
  EXPECT_NEAR(r.p, 0.125, 1e-12);
  // A zero difference is dropped (n = 5), not ranked.
  r = wilcoxon_signed_rank(std::vector<double>{0, 1, 2, 3, 4, 5});
  EXPECT_EQ(r.n, 5);
  EXPECT_NEAR(r.p, 0.0625, 1e-12);
  // Balanced: W+ = mu -> p = 1.
  r = wilcoxon_signed_rank(std::vector<double>{1, -2, -3, 4});  // W+ = 5 = mu
  EXPECT_DOUBLE_EQ(r.p, 1.0);
  // All zero: no evidence.
  r = wilcoxon_signed_rank(std::vector<double>{0, 0, 0});
  EXPECT_EQ(r.n, 0);
  EXPECT_DOUBLE_EQ(r.p, 1.0);
}

TEST(Stats, WilcoxonExactMatchesBruteForce) {
  Rng rng(2024);
  for (int n = 1; n <= 14; ++n) {
    for (int trial = 0; trial < 5; ++trial) {
      // Distinct magnitudes (no ties), random signs, shifted so both tails get exercised.
      std::vector<double> d;
      for (int i = 0; i < n; ++i) {
        double mag = (i + 1) + 0.001 * double(rng.below(100));
        bool positive = rng.uniform() < 0.3 + 0.1 * trial;
        d.push_back(positive ? mag : -mag);
      }
      WilcoxonResult r = wilcoxon_signed_rank(d);
      ASSERT_TRUE(r.exact);
      EXPECT_NEAR(r.p, brute_force_wilcoxon_p(d), 1e-12) << "n=" << n << " trial=" << trial;
    }
  }
}

TEST(Stats, WilcoxonNormalApproximationWithTies) {
  // d = 1 1 2 2 -3 4: |d| ranks 1.5 1.5 3.5 3.5 5 6; W+ = 1.5+1.5+3.5+3.5+6 = 16.
  // mu = 6*7/4 = 10.5; var = 6*7*13/24 - (6 + 6)/48 = 22.75 - 0.25 = 22.5;
  // z = (16 - 10.5 - 0.5)/sqrt(22.5) = 1.05409; p = erfc(z/sqrt 2) = 0.29184054514378854.
  WilcoxonResult r = wilcoxon_signed_rank(std::vector<double>{1, 1, 2, 2, -3, 4});
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.w_plus, 16);
  EXPECT_NEAR(r.p, 0.29184054514378854, 1e-12);
  // Ties within floating-point noise count as ties: 0.1+0.2 vs 0.3.
  r = wilcoxon_signed_rank(std::vector<double>{0.1 + 0.2, 0.3, 1.0});
  EXPECT_FALSE(r.exact);
}

TEST(Stats, WilcoxonNormalApproximationLargeN) {
  // n = 30, all positive: W+ = 465, mu = 232.5, var = 30*31*61/24 = 2363.75,
  // z = (232.5 - 0.5)/sqrt(2363.75); p = erfc(z/sqrt 2) = 1.825371456361214e-06.
  std::vector<double> d;
  for (int i = 1; i <= 30; ++i) d.push_back(i);
  WilcoxonResult r = wilcoxon_signed_rank(d);
  EXPECT_FALSE(r.exact);
  EXPECT_NEAR(r.p / 1.825371456361214e-06, 1.0, 1e-9);
  // n = 26 (just past the exact limit), rank 1 negative: W+ = 351 - 1 = 350,
  // mu = 175.5, var = 26*27*53/24; p = 9.904491799970094e-06.
  d.clear();
  for (int i = 1; i <= 26; ++i) d.push_back(i == 1 ? -1 : i);
  r = wilcoxon_signed_rank(d);
  EXPECT_FALSE(r.exact);
  EXPECT_NEAR(r.p / 9.904491799970094e-06, 1.0, 1e-9);
}

TEST(Stats, MedianOrderStatisticInterval) {
  // n = 10: 2 P(B <= 1) = 22/1024 <= 0.05 but 2 P(B <= 2) = 112/1024 > 0.05, so k = 2:
  // [x_(2), x_(9)] with coverage 1 - 22/1024 = 0.978515625.
  std::vector<double> x = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  MedianInterval m = median_with_ci(x);
  EXPECT_DOUBLE_EQ(m.median, 5.5);
  EXPECT_DOUBLE_EQ(m.lo, 2);
  EXPECT_DOUBLE_EQ(m.hi, 9);
  EXPECT_DOUBLE_EQ(m.coverage, 0.978515625);
  // n = 5 cannot reach 95%: [min, max] with coverage 1 - 2/32 = 0.9375, reported honestly.
  m = median_with_ci(std::vector<double>{3, 1, 2, 5, 4});
  EXPECT_DOUBLE_EQ(m.lo, 1);
  EXPECT_DOUBLE_EQ(m.hi, 5);
  EXPECT_DOUBLE_EQ(m.coverage, 0.9375);
  // n = 6: k = 1, 2 P(B <= 0) = 2/64 -> coverage 0.96875.
  m = median_with_ci(std::vector<double>{1, 2, 3, 4, 5, 6});
  EXPECT_DOUBLE_EQ(m.coverage, 0.96875);
}

TEST(Stats, BootstrapIsSeededAndSane) {
  std::vector<double> constant(20, 3.5);
  Interval c = bootstrap_mean_ci(constant, 2000, 1);
  EXPECT_DOUBLE_EQ(c.lo, 3.5);
  EXPECT_DOUBLE_EQ(c.hi, 3.5);

  // A sample from our own RNG: uniform(0,1), n = 400 (sd ~ 0.2887).
  Rng rng(99);
  std::vector<double> x;
  for (int i = 0; i < 400; ++i) x.push_back(rng.uniform());
  Interval a = bootstrap_mean_ci(x, 4000, 5);
  Interval b = bootstrap_mean_ci(x, 4000, 5);
  Interval other = bootstrap_mean_ci(x, 4000, 6);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_NE(a.lo, other.lo);
  EXPECT_TRUE(a.contains(mean(x)));
  // Normal theory width 2 * 1.96 * sd / sqrt(n); the percentile bootstrap agrees within ~10%.
  double expected = 2 * 1.96 * sample_sd(x) / std::sqrt(400.0);
  EXPECT_NEAR((a.hi - a.lo) / expected, 1.0, 0.1);
  // Any statistic works: the median's CI contains the sample median.
  Interval med = bootstrap_ci(x, [](std::span<const double> s) { return median(s); }, 2000, 3);
  EXPECT_TRUE(med.contains(median(x)));
  EXPECT_TRUE(std::isnan(bootstrap_mean_ci(std::vector<double>{}).lo));
}

// Checks that every tag is closed in order; returns the first problem or "" when balanced.
std::string check_balanced(const std::string& svg) {
  std::vector<std::string> stack;
  size_t pos = 0;
  while ((pos = svg.find('<', pos)) != std::string::npos) {
    size_t end = svg.find('>', pos);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(pos);
    std::string tag = svg.substr(pos + 1, end - pos - 1);
    pos = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return "unexpected </" + name + ">";
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
  }
  return stack.empty() ? "" : "unclosed <" + stack.back() + ">";
}

TEST(SvgPlot, LogAxisChartIsWellFormed) {
  ChartSpec spec;
  spec.title = "Decode tok/s vs context <q8 & f16>";
  spec.x_label = "context tokens";
  spec.y_label = "tokens / s";
  spec.log2_x = true;
  std::vector<double> ctx = {4096, 8192, 16384, 32768, 65536, 131072, 262144};
  spec.series.push_back({"f16 cache", ctx, {52, 50, 47, 43, 37, 30, 22}, false});
  spec.series.push_back({"q8 cache", ctx, {55, 54, 52, 49, 45, 40, 33}, true});
  // A NaN point (a failed run) is skipped, not written.
  spec.series.push_back({"q4 cache", ctx, {56, 55, NAN, 51, 48, 44, 39}, false});
  std::string svg = render_line_chart(spec);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(check_balanced(svg), "") << svg;
  for (const char* name : {"f16 cache", "q8 cache", "q4 cache"})
    EXPECT_NE(svg.find(name), std::string::npos) << name;
  EXPECT_NE(svg.find("&lt;q8 &amp; f16&gt;"), std::string::npos);  // escaped title
  for (const char* tick : {">4K<", ">16K<", ">64K<", ">256K<"})
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  // Distinct colours for the three series.
  EXPECT_NE(svg.find("#0072B2"), std::string::npos);
  EXPECT_NE(svg.find("#D55E00"), std::string::npos);
  EXPECT_NE(svg.find("#009E73"), std::string::npos);
  // Every number in the document is finite.
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  std::regex number(R"([-+]?[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?)");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), number); it != std::sregex_iterator();
       ++it)
    EXPECT_TRUE(std::isfinite(std::strtod(it->str().c_str(), nullptr)));
}

TEST(SvgPlot, DegenerateInputsStayFinite) {
  ChartSpec spec;
  spec.title = "empty";
  std::string svg = render_line_chart(spec);
  EXPECT_EQ(check_balanced(svg), "");
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  spec.series.push_back({"flat", {1, 2, 3}, {0, 0, 0}, false});
  spec.series.push_back({"one point", {2}, {INFINITY}, false});
  svg = render_line_chart(spec);
  EXPECT_EQ(check_balanced(svg), "");
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  EXPECT_EQ(format_count(4096), "4K");
  EXPECT_EQ(format_count(262144), "256K");
  EXPECT_EQ(format_count(1 << 20), "1M");
  EXPECT_EQ(format_count(1500), "1500");
}

}  // namespace
}  // namespace weft::lab
