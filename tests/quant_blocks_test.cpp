// Tests of the GGML block types: descriptors, the exact byte layouts (hand-built blocks decoded
// against the documented formulas), scale packing, and quantize -> dequantize error per type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant_types.h"
#include "kernels/cpu/quant_blocks.h"

namespace weft {
namespace {

uint32_t fresh_seed() {
  static std::random_device rd;
  return rd();
}

constexpr GgmlType kAllTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                                  GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K,
                                  GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K};

TEST(QuantTypes, IdsAndSizesMatchGgml) {
  EXPECT_EQ(uint32_t(GgmlType::kF32), 0u);
  EXPECT_EQ(uint32_t(GgmlType::kF16), 1u);
  EXPECT_EQ(uint32_t(GgmlType::kQ4_0), 2u);
  EXPECT_EQ(uint32_t(GgmlType::kQ8_0), 8u);
  EXPECT_EQ(uint32_t(GgmlType::kQ4_K), 12u);
  EXPECT_EQ(uint32_t(GgmlType::kQ5_K), 13u);
  EXPECT_EQ(uint32_t(GgmlType::kQ6_K), 14u);
  EXPECT_EQ(uint32_t(GgmlType::kQ8_K), 15u);
  EXPECT_EQ(uint32_t(GgmlType::kBF16), 30u);
  EXPECT_EQ(ggml_block_bytes(GgmlType::kQ8_0), sizeof(BlockQ8_0));
  EXPECT_EQ(ggml_block_bytes(GgmlType::kQ4_0), sizeof(BlockQ4_0));
  EXPECT_EQ(ggml_block_bytes(GgmlType::kQ4_K), sizeof(BlockQ4_K));
  EXPECT_EQ(ggml_block_bytes(GgmlType::kQ5_K), sizeof(BlockQ5_K));
  EXPECT_EQ(ggml_block_bytes(GgmlType::kQ6_K), sizeof(BlockQ6_K));
  EXPECT_EQ(ggml_block_bytes(GgmlType::kQ8_K), sizeof(BlockQ8_K));
  // Row sizes are blocks x block bytes, never cols x an element size.
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ4_K, 4096), 16u * 144u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ6_K, 4352), 17u * 210u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ4_0, 96), 3u * 18u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kBF16, 5), 10u);
  EXPECT_FALSE(ggml_row_bytes_checked(GgmlType::kQ4_K, 4096 + 32).has_value());
  EXPECT_FALSE(ggml_row_bytes_checked(GgmlType::kQ8_0, -32).has_value());
  EXPECT_EQ(*ggml_row_bytes_checked(GgmlType::kQ8_0, 64), 68u);
  EXPECT_EQ(ggml_type_traits(3u), nullptr);  // q4_1: a ggml type weft does not compute with
  EXPECT_STREQ(ggml_type_name_any(3), "q4_1");
  EXPECT_STREQ(ggml_type_name_any(1000), "unknown");
  for (GgmlType t : kAllTypes) {
    ASSERT_NE(ggml_type_traits(uint32_t(t)), nullptr);
    EXPECT_EQ(ggml_type_traits(uint32_t(t))->type, t);
  }
  EXPECT_EQ(*ggml_type_to_dtype(GgmlType::kQ4_0), DType::kQ4_0);
  EXPECT_EQ(*ggml_type_to_dtype(GgmlType::kQ6_K), DType::kQ6_K);
  EXPECT_FALSE(ggml_type_to_dtype(GgmlType::kQ8_K).has_value());  // activations only
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const DType d = *ggml_type_to_dtype(t);
    EXPECT_EQ(*ggml_type_from_dtype(d), t);
    EXPECT_EQ(int64_t(dtype_block(d)), ggml_block_size(t));
    EXPECT_EQ(dtype_size(d), ggml_block_bytes(t));
    EXPECT_EQ(dtype_bytes(d, 512), ggml_row_bytes(t, 512));
  }
  EXPECT_EQ(*ggml_type_from_dtype(DType::kBF16), GgmlType::kBF16);
}

TEST(QuantBlocks, ScalePackingRoundTripsAndMatchesTheDocumentedBits) {
  std::mt19937 rng(fresh_seed());
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t sc[8], m[8], packed[12], sc2[8], m2[8];
    for (int i = 0; i < 8; ++i) {
      sc[i] = uint8_t(rng() % 64);
      m[i] = uint8_t(rng() % 64);
    }
    pack_scales_k4(sc, m, packed);
    unpack_scales_k4(packed, sc2, m2);
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(sc2[i], sc[i]);
      ASSERT_EQ(m2[i], m[i]);
    }
    // llama.cpp's get_scale_min_k4, written out independently for j >= 4.
    for (int j = 4; j < 8; ++j) {
      EXPECT_EQ((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4), sc[j]);
      EXPECT_EQ((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4), m[j]);
    }
  }
}

TEST(QuantBlocks, Q4_0LowNibblesAreTheFirstHalf) {
  BlockQ4_0 b{};
  b.d = f32_to_f16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
  float y[32];
  dequantize_row(GgmlType::kQ4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], float(j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], float(15 - j - 8) * 0.5f);
  }
}

TEST(QuantBlocks, Q4_KAndQ5_KLayout) {
  BlockQ5_K b{};
  b.d = f32_to_f16(1.0f);
  b.dmin = f32_to_f16(0.25f);
  uint8_t sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = uint8_t(s + 1);
    m[s] = uint8_t(60 - s);
  }
  pack_scales_k4(sc, m, b.scales);
  // Element e = 64c + 32h + l: nibble h of qs[32c + l]; fifth bit in bit (2c + h) of qh[l].
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = uint8_t((l % 16) | ((15 - l % 16) << 4));
  for (int l = 0; l < 32; ++l) b.qh[l] = uint8_t(l % 3 == 0 ? 0xAA : 0x05);
  std::vector<float> y(256);
  dequantize_row(GgmlType::kQ5_K, &b, y.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, c = s / 2, h = s % 2, l = e % 32;
    const int nib = h == 0 ? l % 16 : 15 - l % 16;
    const int hb = (b.qh[l] >> (2 * c + h)) & 1;
    ASSERT_EQ(y[size_t(e)], float(sc[s]) * float(nib + 16 * hb) - 0.25f * float(m[s])) << "element " << e;
  }
  // q4_K is the same without the fifth bit (its struct simply has no qh).
  BlockQ4_K b4{};
  b4.d = b.d;
  b4.dmin = b.dmin;
  std::memcpy(b4.scales, b.scales, 12);
  std::memcpy(b4.qs, b.qs, 128);
  dequantize_row(GgmlType::kQ4_K, &b4, y.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, h = s % 2, l = e % 32;
    const int nib = h == 0 ? l % 16 : 15 - l % 16;
    ASSERT_EQ(y[size_t(e)], float(sc[s]) * float(nib) - 0.25f * float(m[s])) << "element " << e;
  }
}

TEST(QuantBlocks, Q6_KLayout) {
  BlockQ6_K b{};
  b.d = f32_to_f16(0.5f);
  for (int s = 0; s < 16; ++s) b.scales[s] = int8_t(s % 2 ? -(s + 1) : s + 1);
  std::mt19937 rng(fresh_seed());
  for (auto& v : b.ql) v = uint8_t(rng());
  for (auto& v : b.qh) v = uint8_t(rng());
  std::vector<float> y(256);
  dequantize_row(GgmlType::kQ6_K, &b, y.data(), 256);
  for (int e = 0; e < 256; ++e) {
    // Element e = 128h + 32i + l: low 4 bits from ql[64h + l + 32(i&1)] (low nibble when i < 2),
    // high 2 bits from bits 2i..2i+1 of qh[32h + l]; sub-block e / 16.
    const int h = e / 128, i = (e % 128) / 32, l = e % 32;
    const uint8_t lowbyte = b.ql[64 * h + l + 32 * (i & 1)];
    const int q = ((i < 2 ? lowbyte & 0xF : lowbyte >> 4) | ((b.qh[32 * h + l] >> (2 * i)) & 3) << 4);
    ASSERT_EQ(y[size_t(e)], 0.5f * float(b.scales[e / 16]) * float(q - 32)) << "element " << e;
  }
}

struct ErrorStats {
  double rel_rms;   // ||x - x'|| / ||x||
  double max_abs;
};

ErrorStats round_trip(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(ggml_row_bytes(t, int64_t(x.size())));
  std::vector<float> y(x.size());
  quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(x[i]) * x[i];
    mx = std::max(mx, std::fabs(double(x[i]) - y[i]));
  }
  return {std::sqrt(num / den), mx};
}

TEST(QuantBlocks, QuantizeDequantizeErrorPerType) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(256 * 64);
  for (auto& v : x) v = gauss(rng) * 0.02f;
  for (size_t i = 0; i < x.size(); i += 4096) x[i] *= 3.0f;  // a few mild outliers
  // Relative RMS bounds: what our quantizers give on this data (5 seeds: f16 2.1e-4, bf16 1.65e-3,
  // q8_0 0.0054, q4_0 0.087, q4_K 0.072, q5_K 0.036, q6_K 0.0175, q8_K 0.0072) with ~15-25%
  // margin, so a layout or scale bug (or a worse scale search) fails them.
  struct Bound { GgmlType t; double rel_rms; };
  const Bound bounds[] = {
      {GgmlType::kF32, 0.0},     {GgmlType::kF16, 3e-4},   {GgmlType::kBF16, 2.2e-3},
      {GgmlType::kQ8_0, 0.007},  {GgmlType::kQ4_0, 0.10},  {GgmlType::kQ4_K, 0.085},
      {GgmlType::kQ5_K, 0.043},  {GgmlType::kQ6_K, 0.021}, {GgmlType::kQ8_K, 0.009},
  };
  for (const auto& b : bounds) {
    const ErrorStats e = round_trip(b.t, x);
    std::printf("%-5s rel rms %.5f  max abs %.5f\n", ggml_type_name(b.t), e.rel_rms, e.max_abs);
    EXPECT_LE(e.rel_rms, b.rel_rms) << ggml_type_name(b.t);
  }
}

TEST(QuantBlocks, Q8_0ErrorIsHalfAStepPerBlock) {
  std::mt19937 rng(fresh_seed());
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> x(32 * 50), y(x.size());
  for (auto& v : x) v = u(rng);
  std::vector<BlockQ8_0> q(50);
  quantize_row(GgmlType::kQ8_0, x.data(), q.data(), int64_t(x.size()));
  dequantize_row(GgmlType::kQ8_0, q.data(), y.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i / 32 * 32 + j]));
    const float d = amax / 127;
    // Half a step, plus the f16 rounding of the scale times the largest code.
    EXPECT_LE(std::fabs(x[i] - y[i]), d * 0.5f + 127 * d * 1e-3f) << i;
  }
}

TEST(QuantBlocks, DegenerateBlocks) {
  for (GgmlType t : kAllTypes) {
    const int64_t n = 512;
    std::vector<uint8_t> q(ggml_row_bytes(t, n));
    std::vector<float> y(static_cast<size_t>(n));
    std::vector<float> zeros(size_t(n), 0.0f);
    quantize_row(t, zeros.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << ggml_type_name(t);
    // A constant negative block and a lone spike must come back close.
    std::vector<float> c(size_t(n), -0.75f);
    c[300] = 4.0f;
    quantize_row(t, c.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    EXPECT_NEAR(y[300], 4.0f, 0.3f) << ggml_type_name(t);
    EXPECT_NEAR(y[10], -0.75f, 0.3f) << ggml_type_name(t);
  }
}

}  // namespace
}  // namespace weft
