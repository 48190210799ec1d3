// KvCache: paged growth (no copy), row encoding per type, truncation, and the byte accounting.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cache/kv_cache.h"
#include "kernels/cpu/kv_quant.h"

namespace weft {
namespace {

std::vector<float> random_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(KvCache, GrowsInPagesWithoutMovingRows) {
  KvCacheSpec spec{2, 2, 64, DType::kF16, DType::kF16, 16};
  KvCache cache(spec);
  const int64_t row = spec.n_kv_heads * spec.head_dim;
  auto k = random_rows(40 * row, 1), v = random_rows(40 * row, 2);
  cache.append(0, k.data(), v.data(), 10);
  const uint8_t* first = cache.view(0).k_row(1, 3);
  cache.append(0, k.data() + 10 * row, v.data() + 10 * row, 30);  // crosses two page boundaries
  EXPECT_EQ(cache.view(0).k_row(1, 3), first) << "growth moved an existing row";
  EXPECT_EQ(cache.length(0), 40);
  EXPECT_EQ(cache.length(1), 0);
  // page = 2 heads x 16 tokens x (128 B of K + 128 B of V) = 8192 B; layer 0 holds 3 pages
  EXPECT_EQ(cache.bytes_allocated(), 3u * 8192);
  std::vector<float> got(64);
  for (int64_t t : {0, 15, 16, 31, 32, 39}) {
    for (int64_t h = 0; h < 2; ++h) {
      decode_kv_row(DType::kF16, cache.view(0).k_row(h, t), got.data(), 64);
      for (int64_t d = 0; d < 64; ++d)
        EXPECT_EQ(got[size_t(d)], f16_to_f32(f32_to_f16(k[size_t((t * 2 + h) * 64 + d)]))) << t << " " << h;
      decode_kv_row(DType::kF16, cache.view(0).v_row(h, t), got.data(), 64);
      EXPECT_EQ(got[0], f16_to_f32(f32_to_f16(v[size_t((t * 2 + h) * 64)])));
    }
  }
  cache.truncate(17);
  EXPECT_EQ(cache.length(0), 17);
  EXPECT_EQ(cache.bytes_allocated(), 2u * 8192);
  EXPECT_EQ(cache.view(0).k_row(1, 3), first);
}

TEST(KvCache, BytesPerTokenMatchesTypes) {
  KvCacheSpec spec{10, 2, 256, DType::kF16, DType::kF16, 256};
  EXPECT_EQ(KvCache(spec).bytes_per_token(), 20480u);  // Qwen3.5-35B-A3B geometry
  spec.k_type = spec.v_type = DType::kQ8_0;
  EXPECT_EQ(KvCache(spec).bytes_per_token(), 10u * 2 * 2 * 8 * 34);
  spec.k_type = DType::kQ4_0;
  EXPECT_EQ(KvCache(spec).bytes_per_token(), 10u * 2 * (8 * 18 + 8 * 34));
  EXPECT_FALSE(kv_type_supported(DType::kQ8_0, 8));
  EXPECT_TRUE(kv_type_supported(DType::kF16, 8));
}

// Quantization error per value is at most half a step (d/2; d = amax/127 for q8_0, amax/8 for
// q4_0), plus the f16 rounding of d (relative 2^-11, times |q| <= 127 or 8); q4_0 clamps the
// value opposite the largest one at q = 15, an error of up to one more step.
TEST(KvQuant, RoundTripErrorWithinHalfAStep) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    auto x = random_rows(256, seed);
    x[7] = 9.0f * (seed % 2 ? 1 : -1);  // an outlier channel
    std::vector<uint8_t> buf(dtype_bytes(DType::kQ8_0, 256));  // the larger of the two encodings
    std::vector<float> y(256);
    for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
      encode_kv_row(t, x.data(), buf.data(), 256);
      decode_kv_row(t, buf.data(), y.data(), 256);
      for (int b = 0; b < 8; ++b) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
        const float step = t == DType::kQ8_0 ? amax / 127 : amax / 8;
        for (int j = 0; j < 32; ++j)
          EXPECT_LE(std::fabs(y[size_t(b * 32 + j)] - x[size_t(b * 32 + j)]),
                    t == DType::kQ8_0 ? step * (0.5f + 127.0f / 2048) + 1e-6f : step * (1.5f + 8.0f / 2048) + 1e-6f)
              << dtype_name(t) << " seed " << seed << " block " << b;
      }
    }
  }
}

}  // namespace
}  // namespace weft
