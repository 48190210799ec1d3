// Small-sample statistics for the measurement lab: location, quantiles, a seeded RNG, bootstrap
// intervals and the paired nonparametric tests (sign test, Wilcoxon signed-rank).
//
// Conventions used throughout (so that every number the lab prints has one definition):
//   * quantile(q) is Hyndman & Fan (1996) type 7 (linear interpolation between order statistics,
//     the default of R and NumPy): h = (n-1)q, Q = x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h]).
//   * sample_sd divides by n-1 (Bessel's correction).
//   * Random numbers come from xoshiro256** (Blackman & Vigna 2018) seeded through splitmix64
//     (Steele, Lea & Flood 2014), so a fixed seed gives the same bootstrap on every platform.
//   * Paired tests drop zero differences (Wilcoxon's 1945 convention, scipy's zero_method="wilcox"),
//     and two values count as tied / zero when they differ by at most kTieRelTol relative to their
//     magnitude, so that averaging floating-point repeats does not invent spurious ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace weft::lab {

inline constexpr double kTieRelTol = 1e-9;
inline constexpr uint64_t kDefaultSeed = 0x5eedf00dULL;

double mean(std::span<const double> x);                  // NaN when empty
double sample_sd(std::span<const double> x);             // n-1 denominator; NaN when n < 2
double quantile(std::span<const double> x, double q);    // type 7; NaN when empty
double median(std::span<const double> x);                // quantile(x, 0.5)

// splitmix64 step: advances *state and returns the next output (used to seed xoshiro).
uint64_t splitmix64(uint64_t* state);

// xoshiro256**: fast, statistically strong, 256-bit state; never seeded with all zeros because the
// four state words come from splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed = kDefaultSeed);
  uint64_t next();
  // Uniform integer in [0, n) without modulo bias (Lemire 2019, multiply-and-reject). n > 0.
  uint64_t below(uint64_t n);
  // Uniform double in [0, 1) with 53 random bits.
  double uniform();

 private:
  uint64_t s_[4];
};

struct Interval {
  double lo = 0;
  double hi = 0;
  bool contains(double v) const { return lo <= v && v <= hi; }
  bool excludes_zero() const { return lo > 0 || hi < 0; }
};

using Statistic = std::function<double(std::span<const double>)>;

// Percentile bootstrap (Efron & Tibshirani 1993, ch. 13): resample x with replacement
// n_resamples times, evaluate stat on each resample, and return the (1-level)/2 and (1+level)/2
// type-7 quantiles of those values. Deterministic for a given seed. Empty x gives [NaN, NaN].
Interval bootstrap_ci(std::span<const double> x, const Statistic& stat, int n_resamples = 10000,
                      uint64_t seed = kDefaultSeed, double level = 0.95);
// Shorthand for the CI of the mean (the usual case: mean of paired differences).
Interval bootstrap_mean_ci(std::span<const double> x, int n_resamples = 10000,
                           uint64_t seed = kDefaultSeed, double level = 0.95);

// Median with a distribution-free confidence interval from order statistics (the binomial
// method, e.g. Conover 1999 §3.2; Hahn & Meeker 1991): with B ~ Binomial(n, 1/2), the interval
// [x_(k), x_(n-k+1)] (1-based order statistics) covers the population median with probability
// 1 - 2 P(B <= k-1). k is the largest value whose coverage is still >= level. For n < 6 no k
// reaches 95%, so the interval is [min, max] and `coverage` says what it really is.
struct MedianInterval {
  double median = 0;
  double lo = 0;
  double hi = 0;
  double coverage = 0;  // exact coverage of [lo, hi]
  int n = 0;
};
MedianInterval median_with_ci(std::span<const double> x, double level = 0.95);

// P(B <= k) for B ~ Binomial(n, 1/2).
double binomial_half_cdf(int k, int n);

// Two-sided exact sign test (binomial, p = 1/2): p = min(1, 2 P(B <= min(wins, losses))) with
// n = wins + losses. Ties must already be removed. No data gives p = 1.
double sign_test_p(int wins, int losses);
// Same, counting positive and negative differences (zeros dropped).
double sign_test_p(std::span<const double> diffs);

// Wilcoxon signed-rank test (Wilcoxon 1945) on paired differences, two-sided.
//   * zero differences are dropped before ranking (see file comment); n counts the rest;
//   * |d| are ranked with average ranks for ties; W+ = sum of ranks of positive differences;
//   * exact null distribution (enumerated by dynamic programming over ranks 1..n) when
//     n <= kWilcoxonExactMaxN and there are no ties: p = min(1, 2 min(P(W+ <= w), P(W+ >= w)));
//   * otherwise the normal approximation with tie correction to the variance and a 0.5
//     continuity correction (Lehmann 1975, §3.2; as scipy.stats.wilcoxon with correction=True):
//       mu = n(n+1)/4,  var = n(n+1)(2n+1)/24 - sum_t (t^3 - t)/48,
//       z = (|W+ - mu| - 0.5)_+ / sqrt(var),  p = 2 (1 - Phi(z)).
//   n == 0 (all zero) gives p = 1.
inline constexpr int kWilcoxonExactMaxN = 25;
struct WilcoxonResult {
  double p = 1;
  double w_plus = 0;
  int n = 0;           // non-zero differences
  bool exact = false;  // exact distribution used
};
WilcoxonResult wilcoxon_signed_rank(std::span<const double> diffs);

// True when |a - b| is within the tie tolerance (relative to the larger magnitude, absolute near 0).
bool nearly_equal(double a, double b);

// Standard normal CDF.
double normal_cdf(double z);

}  // namespace weft::lab
