// Implementation of the lab's statistics (definitions and sources are in stats.h).
#include "lab/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace weft::lab {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> sorted_copy(std::span<const double> x) {
  std::vector<double> v(x.begin(), x.end());
  std::sort(v.begin(), v.end());
  return v;
}

// Type-7 quantile of already sorted data.
double quantile_sorted(const std::vector<double>& v, double q) {
  if (v.empty()) return kNaN;
  q = std::clamp(q, 0.0, 1.0);
  double h = (double(v.size()) - 1) * q;
  size_t lo = size_t(std::floor(h));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (h - double(lo)) * (v[hi] - v[lo]);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

double mean(std::span<const double> x) {
  if (x.empty()) return kNaN;
  double s = 0;
  for (double v : x) s += v;
  return s / double(x.size());
}

double sample_sd(std::span<const double> x) {
  if (x.size() < 2) return kNaN;
  double m = mean(x);
  double ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  return std::sqrt(ss / double(x.size() - 1));
}

double quantile(std::span<const double> x, double q) { return quantile_sorted(sorted_copy(x), q); }

double median(std::span<const double> x) { return quantile(x, 0.5); }

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Rng::Rng(uint64_t seed) {
  uint64_t sm = seed;
  for (auto& w : s_) w = splitmix64(&sm);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::below(uint64_t n) {
  // Lemire's nearly-divisionless method: the high word of x*n is uniform once the low word is
  // outside the short biased range [0, 2^64 mod n).
  unsigned __int128 m = (unsigned __int128)next() * n;
  uint64_t low = uint64_t(m);
  if (low < n) {
    uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = (unsigned __int128)next() * n;
      low = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

Interval bootstrap_ci(std::span<const double> x, const Statistic& stat, int n_resamples,
                      uint64_t seed, double level) {
  if (x.empty() || n_resamples < 1) return {kNaN, kNaN};
  Rng rng(seed);
  std::vector<double> resample(x.size());
  std::vector<double> stats;
  stats.reserve(size_t(n_resamples));
  for (int r = 0; r < n_resamples; ++r) {
    for (auto& v : resample) v = x[rng.below(x.size())];
    stats.push_back(stat(resample));
  }
  std::sort(stats.begin(), stats.end());
  double alpha = 1 - level;
  return {quantile_sorted(stats, alpha / 2), quantile_sorted(stats, 1 - alpha / 2)};
}

Interval bootstrap_mean_ci(std::span<const double> x, int n_resamples, uint64_t seed,
                           double level) {
  return bootstrap_ci(
      x, [](std::span<const double> s) { return mean(s); }, n_resamples, seed, level);
}

double binomial_half_cdf(int k, int n) {
  if (k < 0) return 0;
  if (k >= n) return 1;
  if (n <= 1000) {
    // C(n, i) by the exact recurrence C(n, i+1) = C(n, i) (n-i)/(i+1): exact integers while they
    // fit in 53 bits, so small-n p values are exact dyadic fractions; 2^1000 still fits a double.
    double c = 1, sum = 0;
    for (int i = 0; i <= k; ++i) {
      sum += c;
      c = c * double(n - i) / double(i + 1);
    }
    return std::min(1.0, std::ldexp(sum, -n));
  }
  // Large n: sum C(n, i) 2^-n in log space so that nothing overflows or underflows.
  double log_half_n = -double(n) * std::log(2.0);
  double sum = 0;
  for (int i = 0; i <= k; ++i) {
    double log_c = std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0);
    sum += std::exp(log_c + log_half_n);
  }
  return std::min(1.0, sum);
}

MedianInterval median_with_ci(std::span<const double> x, double level) {
  MedianInterval r;
  r.n = int(x.size());
  if (x.empty()) {
    r.median = r.lo = r.hi = kNaN;
    return r;
  }
  std::vector<double> v = sorted_copy(x);
  r.median = quantile_sorted(v, 0.5);
  int n = r.n;
  int best_k = 1;  // [min, max]
  for (int k = 1; k <= n / 2; ++k) {
    if (1 - 2 * binomial_half_cdf(k - 1, n) >= level) best_k = k;
  }
  r.lo = v[size_t(best_k - 1)];
  r.hi = v[size_t(n - best_k)];
  r.coverage = 1 - 2 * binomial_half_cdf(best_k - 1, n);
  return r;
}

double sign_test_p(int wins, int losses) {
  int n = wins + losses;
  if (n <= 0) return 1;
  return std::min(1.0, 2 * binomial_half_cdf(std::min(wins, losses), n));
}

namespace {

// Largest |d| of the sample: the scale against which "zero" is judged.
double max_abs(std::span<const double> d) {
  double m = 0;
  for (double v : d) m = std::max(m, std::fabs(v));
  return m;
}

bool is_zero_diff(double v, double scale) { return std::fabs(v) <= kTieRelTol * scale; }

}  // namespace

double sign_test_p(std::span<const double> diffs) {
  double scale = max_abs(diffs);
  int wins = 0, losses = 0;
  for (double v : diffs) {
    if (is_zero_diff(v, scale)) continue;
    (v > 0 ? wins : losses)++;
  }
  return sign_test_p(wins, losses);
}

bool nearly_equal(double a, double b) {
  return std::fabs(a - b) <= kTieRelTol * std::max(std::fabs(a), std::fabs(b));
}

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

WilcoxonResult wilcoxon_signed_rank(std::span<const double> diffs) {
  WilcoxonResult r;
  double scale = max_abs(diffs);
  std::vector<double> d;
  for (double v : diffs)
    if (!is_zero_diff(v, scale)) d.push_back(v);
  int n = int(d.size());
  r.n = n;
  if (n == 0) return r;

  std::vector<size_t> order(static_cast<size_t>(n));
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return std::fabs(d[a]) < std::fabs(d[b]); });
  // Average ranks over groups of (nearly) equal |d|; remember group sizes for the tie correction.
  std::vector<double> rank(static_cast<size_t>(n));
  double tie_term = 0;  // sum over groups of t^3 - t
  bool ties = false;
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && nearly_equal(std::fabs(d[order[size_t(j)]]), std::fabs(d[order[size_t(i)]]))) ++j;
    double avg = (double(i + 1) + double(j)) / 2;  // mean of ranks i+1 .. j
    for (int k = i; k < j; ++k) rank[order[size_t(k)]] = avg;
    double t = j - i;
    if (t > 1) ties = true;
    tie_term += t * t * t - t;
    i = j;
  }
  for (int i = 0; i < n; ++i)
    if (d[size_t(i)] > 0) r.w_plus += rank[size_t(i)];

  if (n <= kWilcoxonExactMaxN && !ties) {
    // counts[s] = number of subsets of {1..n} with rank sum s = 2^n P(W+ = s) under H0.
    int max_sum = n * (n + 1) / 2;
    std::vector<double> counts(size_t(max_sum + 1), 0.0);
    counts[0] = 1;
    for (int k = 1; k <= n; ++k)
      for (int s = max_sum; s >= k; --s) counts[size_t(s)] += counts[size_t(s - k)];
    int w = int(std::lround(r.w_plus));
    double total = std::ldexp(1.0, n);
    double lower = 0, upper = 0;
    for (int s = 0; s <= max_sum; ++s) {
      if (s <= w) lower += counts[size_t(s)];
      if (s >= w) upper += counts[size_t(s)];
    }
    r.p = std::min(1.0, 2 * std::min(lower, upper) / total);
    r.exact = true;
    return r;
  }

  double nn = n;
  double mu = nn * (nn + 1) / 4;
  double var = nn * (nn + 1) * (2 * nn + 1) / 24 - tie_term / 48;
  if (var <= 0) return r;  // p = 1: no spread in the null distribution
  double dev = std::max(0.0, std::fabs(r.w_plus - mu) - 0.5);
  // 2 (1 - Phi(z)) = erfc(z / sqrt 2), without cancellation for large z.
  r.p = std::min(1.0, std::erfc(dev / std::sqrt(var) / std::sqrt(2.0)));
  return r;
}

}  // namespace weft::lab
