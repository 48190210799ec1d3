// KvCache: paged growth (no copy), row encoding per type, truncation, and the byte accounting.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "cache/kv_cache.h"
#include "cache/recurrent_state.h"
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

// KvLayerView::k_rows / v_rows (one division per run): the pointers k_row / v_row give, for runs
// that start, end and cross at page edges, of every length up to the cache's, q8_0 rows (34-byte
// blocks: row sizes that are not a power of two), both heads, K and V.
TEST(KvCache, RowRunsEqualRowByRow) {
  KvCacheSpec spec{1, 2, 64, DType::kQ8_0, DType::kQ8_0, 16};
  KvCache cache(spec);
  const int64_t n = 53, row = spec.n_kv_heads * spec.head_dim;
  auto k = random_rows(n * row, 3), v = random_rows(n * row, 4);
  cache.append(0, k.data(), v.data(), n);
  const KvLayerView view = cache.view(0);
  std::vector<const uint8_t*> got(size_t(n) + 1, nullptr);
  for (int64_t pos : {0, 1, 15, 16, 17, 31, 47, 52})
    for (int64_t len = 0; pos + len <= n; ++len)
      for (int64_t h = 0; h < 2; ++h) {
        view.k_rows(h, pos, len, got.data());
        for (int64_t j = 0; j < len; ++j) ASSERT_EQ(got[size_t(j)], view.k_row(h, pos + j)) << pos << "+" << j;
        view.v_rows(h, pos, len, got.data());
        for (int64_t j = 0; j < len; ++j) ASSERT_EQ(got[size_t(j)], view.v_row(h, pos + j)) << pos << "+" << j;
      }
}

// tile_to (bench --tile-fill): every added position holds the bytes of position p mod base, in
// every layer, head, K and V, for each cache type; it refuses what it cannot tile, changing nothing.
TEST(KvCache, TileToRepeatsWholePages) {
  for (DType type : {DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    KvCacheSpec spec{2, 3, 64, type, type, 16};
    KvCache cache(spec);
    const int64_t row = spec.n_kv_heads * spec.head_dim;
    auto k = random_rows(48 * row, 5), v = random_rows(48 * row, 6);
    for (int64_t l = 0; l < 2; ++l) cache.append(l, k.data(), v.data(), 48);
    EXPECT_FALSE(cache.tile_to(40)) << "below the filled length";
    ASSERT_TRUE(cache.tile_to(48 * 3 + 7));  // a partial last page
    const size_t kb = kv_row_bytes(type, 64);
    for (int64_t l = 0; l < 2; ++l) {
      ASSERT_EQ(cache.length(l), 48 * 3 + 7);
      const KvLayerView view = cache.view(l);
      for (int64_t p = 48; p < view.length; ++p)
        for (int64_t h = 0; h < 3; ++h) {
          ASSERT_EQ(std::memcmp(view.k_row(h, p), view.k_row(h, p % 48), kb), 0) << dtype_name(type) << " " << p;
          ASSERT_EQ(std::memcmp(view.v_row(h, p), view.v_row(h, p % 48), kb), 0) << dtype_name(type) << " " << p;
        }
    }
  }
  KvCacheSpec spec{2, 1, 32, DType::kF16, DType::kF16, 16};
  KvCache odd(spec);
  auto k = random_rows(20 * 32, 7);
  odd.append(0, k.data(), k.data(), 20);
  odd.append(1, k.data(), k.data(), 20);
  EXPECT_FALSE(odd.tile_to(64)) << "20 tokens are not whole pages";
  EXPECT_EQ(odd.length(0), 20);
  odd.append(1, k.data(), k.data(), 12);
  EXPECT_FALSE(odd.tile_to(64)) << "layers of different lengths";
  KvCache empty(spec);
  EXPECT_FALSE(empty.tile_to(64)) << "nothing to repeat";
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
// Host memory that claims not to be host-accessible: the paths a device allocator takes (byte
// copies through the allocator, re-encoding through host copies) without a GPU.
class DeviceLikeAllocator final : public PageAllocator {
 public:
  uint8_t* allocate(size_t bytes) override { ++live; return host_allocator().allocate(bytes); }
  void release(uint8_t* page) override { --live; host_allocator().release(page); }
  bool host_accessible() const override { return false; }
  void copy(uint8_t* dst, const uint8_t* src, size_t bytes) override { ++copies; PageAllocator::copy(dst, src, bytes); }
  int live = 0, copies = 0;
};

bool same_rows(const KvCache& a, const KvCache& b, int64_t layers) {
  for (int64_t l = 0; l < layers; ++l) {
    const KvLayerView x = a.view(l), y = b.view(l);
    if (x.length != y.length) return false;
    for (int64_t p = 0; p < x.length; ++p)
      for (int64_t h = 0; h < x.n_kv_heads; ++h)
        if (std::memcmp(x.k_row(h, p), y.k_row(h, p), x.k_row_bytes) != 0 ||
            std::memcmp(x.v_row(h, p), y.v_row(h, p), x.v_row_bytes) != 0)
          return false;
  }
  return true;
}

TEST(KvCache, AssignFromDeviceMemoryCopiesOrReencodesLikeTheHost) {
  KvCacheSpec spec{2, 2, 64, DType::kF16, DType::kF16, 16};
  KvCache src(spec);
  const int64_t row = spec.n_kv_heads * spec.head_dim;
  auto k = random_rows(37 * row, 5), v = random_rows(37 * row, 6);
  src.append(0, k.data(), v.data(), 37);
  src.append(1, k.data(), v.data(), 20);
  DeviceLikeAllocator dev;
  {
    KvCache same(spec, &dev);  // same types: page copies through the device allocator
    same.assign_from(src);
    EXPECT_GT(dev.copies, 0);
    EXPECT_TRUE(same_rows(same, src, 2));
    KvCacheSpec q = spec;
    q.k_type = q.v_type = DType::kQ8_0;
    q.page_tokens = 32;
    KvCache want(q);  // host re-encoding: the reference
    want.assign_from(src);
    KvCache got(q, &dev);  // device-like: through host copies
    got.assign_from(same);
    EXPECT_TRUE(same_rows(got, want, 2));
  }
  EXPECT_EQ(dev.live, 0) << "pages leaked";
}

TEST(RecurrentState, LivesInItsAllocatorAndCopiesAcrossAllocators) {
  RecurrentStateSpec spec{3, 40, 4, 2, 8, 8};
  DeviceLikeAllocator dev;
  {
    RecurrentState host(spec), device(spec, &dev);
    EXPECT_EQ(dev.live, 1);  // one block for every layer
    for (int64_t l = 0; l < 3; ++l) {
      for (float& x : host.layer(l).conv) x = float(l) + 0.5f;
      for (float& x : host.layer(l).ssm) x = -float(l);
    }
    device.assign_from(host);
    EXPECT_EQ(device.to_host(), host.to_host());
    host.reset();
    host.assign_from(device);  // host <- "device": the device side copies
    EXPECT_EQ(host.to_host(), device.to_host());
    EXPECT_EQ(host.layer(2).conv[0], 2.5f);
    device.reset();
    for (float x : device.to_host()) ASSERT_EQ(x, 0.0f);
    EXPECT_EQ(device.bytes(), size_t(3 * (3 * 40 + 2 * 8 * 8)) * sizeof(float));
  }
  EXPECT_EQ(dev.live, 0);
}

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

// A block whose values are all subnormal has a scale whose inverse overflows to inf: its codes
// must be 0 (defined, and the same on the GPU's kv_append), never what lround or int() of an
// infinity happens to give; a block of zeros of either sign, too. The block then decodes to zeros.
TEST(KvQuant, SubnormalAndZeroBlocksEncodeAsZeroCodes) {
  float x[64];
  for (int j = 0; j < 32; ++j) x[j] = float((j % 7) - 3) * 1e-40f;
  for (int j = 32; j < 64; ++j) x[j] = (j % 2) ? -0.0f : 0.0f;
  BlockQ8_0 q8[2];
  BlockQ4_0 q4[2];
  quantize_row_q8_0(x, q8, 64);
  quantize_row_q4_0(x, q4, 64);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 32; ++j) EXPECT_EQ(q8[b].qs[j], 0) << "q8_0 block " << b << " code " << j;
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 16; ++j) EXPECT_EQ(q4[b].qs[j], b == 0 ? 0 : 0x88) << "q4_0 block " << b << " byte " << j;
  float y[64];
  dequantize_row_q8_0(q8, y, 64);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace weft
