// AVX2/FMA/F16C primitives of the quantized-KV attention kernel (see attention_quant.h).
// Same lane structure and summation order as the scalar twins in attention_quant.cpp.
//
// Measured (AttentionQuantBench.DISABLED_Throughput; decode T=1, head_dim 256, 2 kv heads x GQA 8,
// 2 threads, best of 7, interleaved). On the 2-core dev VM (load average 7-9 from other agents,
// so ±2x noise): speedup over attention_f16 at 4K / 16K / 32K context:
//   q8_0/q8_0 1.9x / 2.1x / 1.8x (other runs 3.7-7x / 3.2x / 1.5-2.1x);
//   q4_0/q4_0 4.9x / 2.0x / 2.1x (other runs 1.5-7x / 2.3x / 1.4-2.0x).
// On a quiet 16-core Xeon pinned to 2 cores: f16 2.44 / 7.44 / 15.4 ms, q8_0 1.47 / 4.91 /
// 10.4 ms (1.66x / 1.52x / 1.49x), q4_0 1.39 / 4.51 / 9.31 ms (1.75x / 1.65x / 1.65x).
// Bytes per token and kv head: f16 1024, q8_0 544, q4_0 288. All three stay compute-bound
// (≤ 4.5 GB/s, below DRAM bandwidth; the dev VM reads 7 GB/s on one core), so the gain comes from cheaper arithmetic
// (integer K dot, register-blocked V) as much as from fewer bytes.
// K scoring, integer dot vs dequantize-to-f32 + FMA dot (4096 q8_0 rows x 8 heads, one thread):
// dev VM 0.38 vs 0.91 ms (2.4x), Xeon 0.40 vs 0.88 ms (2.2x): the integer dot is kept.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/kv_quant.h"

namespace weft {

namespace {

// (0+4)+(2+6) + (1+5)+(3+7): the scalar twins' reduce_lanes.
inline float reduce8(__m256 acc) {
  __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  __m128 s4 = _mm_add_ps(lo, hi);
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// Scores of NH heads against one q8_0 key row: the key block is loaded (and its |k| taken) once
// and dotted with every head's query block. Sign trick: maddubs needs an unsigned operand, so
// |k| · sign(q, k) = k · q; pairs of int16 then summed by madd into 8 int32 lanes of 4 products.
template <int NH>
void scores_q8_tile(const BlockQ8_0* k, const AttnQBlock* q, int64_t nb, float* s) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NH];
#pragma GCC unroll 8
  for (int i = 0; i < NH; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i kq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k[b].qs));
    const __m256i ka = _mm256_sign_epi8(kq, kq);
    const float dk = f16_to_f32(k[b].d);
#pragma GCC unroll 8
    for (int i = 0; i < NH; ++i) {
      const AttnQBlock& qb = q[i * nb + b];
      const __m256i qs = _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb.qs)), kq);
      const __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ka, qs), ones);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(qb.d * dk), acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NH; ++i) s[i] = reduce8(acc[i]);
}

// q4_0 keys: nibbles unpacked once per block to 0..15 (unsigned, so maddubs needs no sign
// trick); the stored +8 offset is removed per lane with the query's precomputed lane_sum8.
template <int NH>
void scores_q4_tile(const BlockQ4_0* k, const AttnQBlock* q, int64_t nb, float* s) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  __m256 acc[NH];
#pragma GCC unroll 8
  for (int i = 0; i < NH; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(k[b].qs));
    const __m256i ku = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
    const float dk = f16_to_f32(k[b].d);
#pragma GCC unroll 8
    for (int i = 0; i < NH; ++i) {
      const AttnQBlock& qb = q[i * nb + b];
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb.qs));
      __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ku, qs), ones);
      p32 = _mm256_sub_epi32(p32, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb.lane_sum8)));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(qb.d * dk), acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NH; ++i) s[i] = reduce8(acc[i]);
}

// Heads in tiles of up to 8 (8 accumulators + key + temporaries fit the 16 ymm registers).
template <template <int> class F, typename Block>
void scores_tiles(const uint8_t* row, const AttnQBlock* q, int64_t group, int64_t nb, float* s) {
  const auto* k = reinterpret_cast<const Block*>(row);
  for (int64_t h = 0; h < group; h += 8) {
    const AttnQBlock* qh = q + h * nb;
    switch (std::min<int64_t>(8, group - h)) {
      case 1: F<1>::run(k, qh, nb, s + h); break;
      case 2: F<2>::run(k, qh, nb, s + h); break;
      case 3: F<3>::run(k, qh, nb, s + h); break;
      case 4: F<4>::run(k, qh, nb, s + h); break;
      case 5: F<5>::run(k, qh, nb, s + h); break;
      case 6: F<6>::run(k, qh, nb, s + h); break;
      case 7: F<7>::run(k, qh, nb, s + h); break;
      default: F<8>::run(k, qh, nb, s + h); break;
    }
  }
}
template <int NH> struct Q8Tile { static void run(const BlockQ8_0* k, const AttnQBlock* q, int64_t nb, float* s) { scores_q8_tile<NH>(k, q, nb, s); } };
template <int NH> struct Q4Tile { static void run(const BlockQ4_0* k, const AttnQBlock* q, int64_t nb, float* s) { scores_q4_tile<NH>(k, q, nb, s); } };

void scores_q8_avx2(const uint8_t* row, const AttnQBlock* q, int64_t group, int64_t nb, float* s) {
  scores_tiles<Q8Tile, BlockQ8_0>(row, q, group, nb, s);
}
void scores_q4_avx2(const uint8_t* row, const AttnQBlock* q, int64_t group, int64_t nb, float* s) {
  scores_tiles<Q4Tile, BlockQ4_0>(row, q, group, nb, s);
}

void load_row_avx2(DType type, const uint8_t* row, float* dst, int64_t n) {
  if (type == DType::kF16) {
    const auto* src = reinterpret_cast<const uint16_t*>(row);
    for (int64_t i = 0; i < n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  } else if (type == DType::kQ8_0) {
    const auto* x = reinterpret_cast<const BlockQ8_0*>(row);
    for (int64_t b = 0; b < n / 32; ++b) {
      const __m256 d = _mm256_set1_ps(f16_to_f32(x[b].d));
      for (int j = 0; j < 32; j += 8) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[b].qs + j));
        _mm256_storeu_ps(dst + b * 32 + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
      }
    }
  } else {  // q4_0
    const auto* x = reinterpret_cast<const BlockQ4_0*>(row);
    const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t b = 0; b < n / 32; ++b) {
      const __m256 d = _mm256_set1_ps(f16_to_f32(x[b].d));
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, low4), eight);                     // elements 0..15
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), eight);  // 16..31
      float* y = dst + b * 32;
      _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
      _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
      _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
      _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
    }
  }
}

float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  return reduce8(acc);
}

// Register-blocked p·v: NH heads x 16 dims of accumulators stay in registers across the tile's
// rows (2 V loads + NH broadcasts per 2·NH FMAs), instead of a load-FMA-store per head and row.
template <int NH>
void accumulate_v_tile(const float* v, int64_t n, const float* p, int64_t p_stride, int64_t hd, float* acc) {
  for (int64_t d = 0; d < hd; d += 16) {
    __m256 a0[NH], a1[NH];
#pragma GCC unroll 4
    for (int i = 0; i < NH; ++i) {
      a0[i] = _mm256_loadu_ps(acc + i * hd + d);
      a1[i] = _mm256_loadu_ps(acc + i * hd + d + 8);
    }
    for (int64_t j = 0; j < n; ++j) {
      const __m256 v0 = _mm256_loadu_ps(v + j * hd + d), v1 = _mm256_loadu_ps(v + j * hd + d + 8);
#pragma GCC unroll 4
      for (int i = 0; i < NH; ++i) {
        const __m256 pj = _mm256_broadcast_ss(p + i * p_stride + j);
        a0[i] = _mm256_fmadd_ps(pj, v0, a0[i]);
        a1[i] = _mm256_fmadd_ps(pj, v1, a1[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NH; ++i) {
      _mm256_storeu_ps(acc + i * hd + d, a0[i]);
      _mm256_storeu_ps(acc + i * hd + d + 8, a1[i]);
    }
  }
}

void accumulate_v_avx2(const float* v, int64_t n, const float* p, int64_t p_stride, int64_t group, int64_t hd,
                       float* acc) {
  for (int64_t h = 0; h < group; h += 4) {
    const float* ph = p + h * p_stride;
    float* ah = acc + h * hd;
    switch (std::min<int64_t>(4, group - h)) {
      case 1: accumulate_v_tile<1>(v, n, ph, p_stride, hd, ah); break;
      case 2: accumulate_v_tile<2>(v, n, ph, p_stride, hd, ah); break;
      case 3: accumulate_v_tile<3>(v, n, ph, p_stride, hd, ah); break;
      default: accumulate_v_tile<4>(v, n, ph, p_stride, hd, ah); break;
    }
  }
}

const AttnQuantOps kAvx2Ops = {scores_q8_avx2, scores_q4_avx2, load_row_avx2, dot_avx2, accumulate_v_avx2, nullptr};

}  // namespace

const AttnQuantOps& attn_quant_ops_avx2() { return kAvx2Ops; }

}  // namespace weft
