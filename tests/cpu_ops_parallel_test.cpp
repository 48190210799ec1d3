// The CPU backend's element-wise and per-row ops run on the pool for prefill-sized inputs (at 16
// threads these serial ops were about half of a prefill's wall time). Each element or row is
// computed alone, so the split must not change a bit: every op on a pool of 1 thread vs 3 and 8,
// on fresh random data with sizes that do not divide evenly; the depthwise conv by channel range
// against the whole call and against a float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "kernels/cpu/gdn.h"

namespace weft {
namespace {

std::vector<float> random_vec(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CausalConvChannels, AnySplitEqualsTheWholeCallAndFloat64) {
  std::mt19937 rng(std::random_device{}());
  for (const int64_t T : {1, 3, 5, 130}) {
    const int64_t C = 203, K = 4, hist = K - 1;
    const auto x0 = random_vec(rng, size_t(T * C)), w = random_vec(rng, size_t(C * K), 0.5f),
               st0 = random_vec(rng, size_t(hist * C));
    std::vector<float> x_all = x0, st_all = st0;
    causal_conv1d_silu(x_all.data(), T, C, w.data(), K, st_all.data());
    // Uneven ranges: 0..1, 1..64, 64..150, 150..203.
    std::vector<float> x_split = x0, st_split = st0;
    const int64_t cuts[] = {0, 1, 64, 150, C};
    for (int i = 0; i + 1 < 5; ++i)
      causal_conv1d_silu_channels(x_split.data(), T, C, w.data(), K, st_split.data(), cuts[i], cuts[i + 1]);
    EXPECT_TRUE(same_bits(x_all, x_split)) << "T=" << T;
    EXPECT_TRUE(same_bits(st_all, st_split)) << "T=" << T;
    // Reference: out[t][c] = silu(sum_j w[c][j] in[t - hist + j][c]), state = the last hist inputs.
    double worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0, mag = 0;  // mag: the sum's scale (f32 rounding is relative to it, not to s)
        for (int64_t j = 0; j < K; ++j) {
          const int64_t at = t - hist + j;
          const double term =
              double(w[size_t(c * K + j)]) * (at < 0 ? st0[size_t((at + hist) * C + c)] : x0[size_t(at * C + c)]);
          s += term;
          mag += std::fabs(term);
        }
        const double ref = s / (1.0 + std::exp(-s));
        worst = std::max(worst, std::fabs(ref - x_all[size_t(t * C + c)]) / (mag + std::fabs(ref) + 1e-30));
      }
    EXPECT_LT(worst, 1e-6) << "T=" << T;
    for (int64_t i = 0; i < hist; ++i)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t at = T - hist + i;  // input time of state row i
        const float want = at < 0 ? st0[size_t((at + hist) * C + c)] : x0[size_t(at * C + c)];
        ASSERT_EQ(st_all[size_t(i * C + c)], want);
      }
  }
}

// Every parallel op of the backend on 1 thread and on 3 / 8: the same bits.
TEST(CpuBackendParallelOps, PoolSizeChangesNoBit) {
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 517, width = 389, n = rows * width;  // > the 32K-element task grain
  const auto a = random_vec(rng, size_t(n)), b = random_vec(rng, size_t(n)), s = random_vec(rng, size_t(rows));
  struct Out {
    std::vector<float> add, swiglu, mul_sigmoid, add_sigmoid_scaled, conv, conv_state, gather, combine;
  };
  // Routing of `rows` rows over 16 experts, top 4, from fixed logits (the same for every pool).
  const int64_t E = 16, K = 4;
  const auto logits0 = random_vec(rng, size_t(rows * E));
  const auto expert_out = random_vec(rng, size_t(rows * K * width));
  const int64_t C = 300, T = 200, KC = 4;
  const auto cx = random_vec(rng, size_t(T * C)), cw = random_vec(rng, size_t(C * KC), 0.5f),
             cs = random_vec(rng, size_t((KC - 1) * C));
  auto run = [&](int threads) {
    CpuBackend be(threads);
    Out o;
    o.add = a;
    be.add(o.add.data(), b.data(), n);
    o.swiglu.resize(size_t(n));
    be.swiglu(a.data(), b.data(), o.swiglu.data(), n);
    o.mul_sigmoid = a;
    be.mul_sigmoid(o.mul_sigmoid.data(), b.data(), n);
    o.add_sigmoid_scaled = a;
    be.add_sigmoid_scaled(o.add_sigmoid_scaled.data(), b.data(), s.data(), rows, width);
    o.conv = cx;
    o.conv_state = cs;
    be.causal_conv(o.conv.data(), T, C, cw.data(), KC, o.conv_state.data());
    std::vector<float> logits = logits0;
    const MoeRouting r = be.moe_route(logits.data(), rows, E, K, true);
    o.gather.resize(size_t(rows * K * width));
    be.moe_gather(r, a.data(), width, o.gather.data());
    o.combine.resize(size_t(n));
    be.moe_combine(r, expert_out.data(), width, o.combine.data());
    return o;
  };
  const Out one = run(1);
  for (int threads : {3, 8}) {
    const Out many = run(threads);
    EXPECT_TRUE(same_bits(one.add, many.add)) << threads;
    EXPECT_TRUE(same_bits(one.swiglu, many.swiglu)) << threads;
    EXPECT_TRUE(same_bits(one.mul_sigmoid, many.mul_sigmoid)) << threads;
    EXPECT_TRUE(same_bits(one.add_sigmoid_scaled, many.add_sigmoid_scaled)) << threads;
    EXPECT_TRUE(same_bits(one.conv, many.conv)) << threads;
    EXPECT_TRUE(same_bits(one.conv_state, many.conv_state)) << threads;
    EXPECT_TRUE(same_bits(one.gather, many.gather)) << threads;
    EXPECT_TRUE(same_bits(one.combine, many.combine)) << threads;
  }
  // And the values are what the ops mean (one spot check each, so a no-op would fail).
  EXPECT_EQ(one.add[77], a[77] + b[77]);
  EXPECT_FLOAT_EQ(one.mul_sigmoid[5], a[5] * (1.0f / (1.0f + std::exp(-b[5]))));
}

}  // namespace
}  // namespace weft
