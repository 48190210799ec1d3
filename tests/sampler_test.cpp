// Sampler: greedy picks the lowest id on ties; sampling is reproducible per seed and honours
// top-k / top-p / min-p filtering.
#include <gtest/gtest.h>

#include <map>

#include "engine/sampler.h"

namespace weft {
namespace {

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  Sampler s(SamplerOptions{});
  const float logits[] = {0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(logits, 4), 1);
}

TEST(Sampler, SeedReproducesAndFiltersApply) {
  const float logits[] = {3.0f, 2.9f, 2.8f, 0.0f, -5.0f, 1.0f};
  SamplerOptions o;
  o.temperature = 1.0f;
  o.seed = 42;
  std::vector<int32_t> a, b;
  Sampler s1(o), s2(o);
  for (int i = 0; i < 200; ++i) {
    a.push_back(s1.sample(logits, 6));
    b.push_back(s2.sample(logits, 6));
  }
  EXPECT_EQ(a, b);
  std::map<int32_t, int> seen;
  for (int32_t t : a) seen[t]++;
  EXPECT_GT(seen.size(), 2u);  // genuinely random at temperature 1

  o.top_k = 2;
  Sampler k2(o);
  for (int i = 0; i < 200; ++i) EXPECT_LT(k2.sample(logits, 6), 2);

  o.top_k = 0;
  o.min_p = 0.5f;  // p(2.8)/p(3.0) = e^-0.2 > 0.5, p(1.0)/p(3.0) = e^-2 < 0.5
  Sampler mp(o);
  for (int i = 0; i < 200; ++i) EXPECT_LE(mp.sample(logits, 6), 2);

  o.min_p = 0.0f;
  o.top_p = 0.3f;  // the top token alone has p ≈ 0.36 >= 0.3
  Sampler tp(o);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(tp.sample(logits, 6), 0);
}

}  // namespace
}  // namespace weft
