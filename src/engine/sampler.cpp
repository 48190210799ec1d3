#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace weft {

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

Sampler::Sampler(const SamplerOptions& options) : options_(options), state_(options.seed ^ 0x9e3779b97f4a7c15ull) {}

// splitmix64 (Steele, Lea & Flood 2014): small, fast, and identical on every platform.
double Sampler::next_uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (options_.temperature <= 0.0f) return argmax(logits, vocab);
  candidates_.resize(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i) candidates_[size_t(i)] = {logits[i] / options_.temperature, int32_t(i)};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = candidates_.size();
  if (options_.top_k > 0 && size_t(options_.top_k) < n) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + options_.top_k, candidates_.end(), by_logit);
    n = size_t(options_.top_k);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax over the survivors (sorted, so the first is the max).
  const float m = candidates_[0].first;
  std::vector<double> p(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i] = std::exp(double(candidates_[i].first - m));
  for (double& v : p) v /= sum;
  size_t keep = n;
  if (options_.min_p > 0.0f) {
    const double floor = p[0] * options_.min_p;
    keep = 1;
    while (keep < n && p[keep] >= floor) ++keep;
  }
  if (options_.top_p < 1.0f) {
    double cum = 0;
    size_t k = 0;
    while (k < keep) {
      cum += p[k++];
      if (cum >= options_.top_p) break;
    }
    keep = std::max<size_t>(k, 1);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i];
  double u = next_uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace weft
