// AVX-512 VNNI primitives of the quantized-KV attention kernel (attention_quant.h), chosen where
// weft::use_avx512_vnni(). Bit-identical to the AVX2 set and the scalar twins:
//  * K scores: vpdpbusd of |k| (or the q4_0 nibbles) with the signed query codes gives each int32
//    lane exactly what vpmaddubsw + vpmaddwd(ones) give (no int16 saturation is possible: |k| <=
//    128, |q| <= 127, so a pair is <= 32512), in one instruction instead of two; the float steps
//    are the AVX2 ones, lane for lane.
//  * p·v: one 512-bit register holds 16 dims of one head, and all heads of a GQA group (up to 8)
//    stay in registers over the tile's rows, so each V row is loaded once per 16 dims instead of
//    once per 4 heads. Every acc[i][d] still takes fma(p[i][j], v[j][d], acc[i][d]) in j order:
//    the vector width does not touch an element's order.
//  * q8_0 V rows are decoded in registers inside the p·v loop (accumulate_v_rows: the same
//    f32(q) * d per value), not written to a tile and read back; other V types take the tile.
//  * Rows are otherwise decoded, and f16 keys dotted, by the AVX2 primitives (the same functions).
// Measured with tools/attention_quant_bench (docs/results.md section 13).
#include <immintrin.h>

#include <algorithm>

#include "core/dtype.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/kv_quant.h"

namespace weft {

namespace {

inline float reduce8(__m256 acc) {  // (0+4)+(2+6) + (1+5)+(3+7), as the AVX2 set
  __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  __m128 s4 = _mm_add_ps(lo, hi);
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

template <int NH>
void scores_q8_tile(const BlockQ8_0* k, const AttnQBlock* q, int64_t nb, float* s) {
  __m256 acc[NH];
#pragma GCC unroll 8
  for (int i = 0; i < NH; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i kq = load32(k[b].qs);
    const __m256i ka = _mm256_sign_epi8(kq, kq);
    const float dk = _cvtsh_ss(k[b].d);
#pragma GCC unroll 8
    for (int i = 0; i < NH; ++i) {
      const AttnQBlock& qb = q[i * nb + b];
      const __m256i p32 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ka, _mm256_sign_epi8(load32(qb.qs), kq));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(qb.d * dk), acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NH; ++i) s[i] = reduce8(acc[i]);
}

template <int NH>
void scores_q4_tile(const BlockQ4_0* k, const AttnQBlock* q, int64_t nb, float* s) {
  const __m128i low4 = _mm_set1_epi8(0x0f);
  __m256 acc[NH];
#pragma GCC unroll 8
  for (int i = 0; i < NH; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(k[b].qs));
    const __m256i ku = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
    const float dk = _cvtsh_ss(k[b].d);
#pragma GCC unroll 8
    for (int i = 0; i < NH; ++i) {
      const AttnQBlock& qb = q[i * nb + b];
      __m256i p32 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ku, load32(qb.qs));
      p32 = _mm256_sub_epi32(p32, load32(qb.lane_sum8));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(qb.d * dk), acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NH; ++i) s[i] = reduce8(acc[i]);
}

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

void scores_q8(const uint8_t* row, const AttnQBlock* q, int64_t group, int64_t nb, float* s) {
  scores_tiles<Q8Tile, BlockQ8_0>(row, q, group, nb, s);
}
void scores_q4(const uint8_t* row, const AttnQBlock* q, int64_t group, int64_t nb, float* s) {
  scores_tiles<Q4Tile, BlockQ4_0>(row, q, group, nb, s);
}

// NH heads x 16 dims in 512-bit registers across the tile's rows.
template <int NH>
void accumulate_v_tile(const float* v, int64_t n, const float* p, int64_t p_stride, int64_t hd, float* acc) {
  for (int64_t d = 0; d < hd; d += 16) {
    __m512 a[NH];
#pragma GCC unroll 8
    for (int i = 0; i < NH; ++i) a[i] = _mm512_loadu_ps(acc + i * hd + d);
    for (int64_t j = 0; j < n; ++j) {
      const __m512 vj = _mm512_loadu_ps(v + j * hd + d);
#pragma GCC unroll 8
      for (int i = 0; i < NH; ++i) a[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * p_stride + j]), vj, a[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NH; ++i) _mm512_storeu_ps(acc + i * hd + d, a[i]);
  }
}

void accumulate_v(const float* v, int64_t n, const float* p, int64_t p_stride, int64_t group, int64_t hd, float* acc) {
  for (int64_t h = 0; h < group; h += 8) {
    const float* ph = p + h * p_stride;
    float* ah = acc + h * hd;
    switch (std::min<int64_t>(8, group - h)) {
      case 1: accumulate_v_tile<1>(v, n, ph, p_stride, hd, ah); break;
      case 2: accumulate_v_tile<2>(v, n, ph, p_stride, hd, ah); break;
      case 3: accumulate_v_tile<3>(v, n, ph, p_stride, hd, ah); break;
      case 4: accumulate_v_tile<4>(v, n, ph, p_stride, hd, ah); break;
      case 5: accumulate_v_tile<5>(v, n, ph, p_stride, hd, ah); break;
      case 6: accumulate_v_tile<6>(v, n, ph, p_stride, hd, ah); break;
      case 7: accumulate_v_tile<7>(v, n, ph, p_stride, hd, ah); break;
      default: accumulate_v_tile<8>(v, n, ph, p_stride, hd, ah); break;
    }
  }
}

// q8_0 V rows straight from the cache: per tile of 32 rows (their addresses computed once; the
// tile's 8.5 KiB stay in L1) and per 32-dim block, each row's 32 codes widened and times its
// scale (load_row's f32(q) * d, the same rounding), then NH heads x 32 dims of fmas in registers.
// Saves writing and re-reading the decoded tile; each acc element still sees the rows in order.
template <int NH>
void accumulate_v_rows_q8(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
                          float* acc) {
  constexpr int64_t kTile = 32;
  const int64_t hd = kv.head_dim;
  const BlockQ8_0* rows[kTile];
  for (int64_t j0 = 0; j0 < n; j0 += kTile) {
    const int64_t nt = std::min(kTile, n - j0);
    for (int64_t j = 0; j < nt; ++j) rows[j] = reinterpret_cast<const BlockQ8_0*>(kv.v_row(g, k0 + j0 + j));
    for (int64_t b = 0; b < hd / 32; ++b) {
      __m512 a0[NH], a1[NH];
#pragma GCC unroll 8
      for (int i = 0; i < NH; ++i) {
        a0[i] = _mm512_loadu_ps(acc + i * hd + 32 * b);
        a1[i] = _mm512_loadu_ps(acc + i * hd + 32 * b + 16);
      }
      for (int64_t j = 0; j < nt; ++j) {
        const BlockQ8_0* blk = rows[j] + b;
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(blk->d));
        const __m256i q = load32(blk->qs);
        const __m512 v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), d);
        const __m512 v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), d);
        const float* pj = p + j0 + j;
#pragma GCC unroll 8
        for (int i = 0; i < NH; ++i) {
          const __m512 pij = _mm512_set1_ps(pj[i * p_stride]);
          a0[i] = _mm512_fmadd_ps(pij, v0, a0[i]);
          a1[i] = _mm512_fmadd_ps(pij, v1, a1[i]);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < NH; ++i) {
        _mm512_storeu_ps(acc + i * hd + 32 * b, a0[i]);
        _mm512_storeu_ps(acc + i * hd + 32 * b + 16, a1[i]);
      }
    }
  }
}

bool accumulate_v_rows(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
                       int64_t group, float* acc) {
  if (kv.v_type != DType::kQ8_0) return false;
  const int64_t hd = kv.head_dim;
  for (int64_t h = 0; h < group; h += 8) {
    const float* ph = p + h * p_stride;
    float* ah = acc + h * hd;
    switch (std::min<int64_t>(8, group - h)) {
      case 1: accumulate_v_rows_q8<1>(kv, g, k0, n, ph, p_stride, ah); break;
      case 2: accumulate_v_rows_q8<2>(kv, g, k0, n, ph, p_stride, ah); break;
      case 3: accumulate_v_rows_q8<3>(kv, g, k0, n, ph, p_stride, ah); break;
      case 4: accumulate_v_rows_q8<4>(kv, g, k0, n, ph, p_stride, ah); break;
      case 5: accumulate_v_rows_q8<5>(kv, g, k0, n, ph, p_stride, ah); break;
      case 6: accumulate_v_rows_q8<6>(kv, g, k0, n, ph, p_stride, ah); break;
      case 7: accumulate_v_rows_q8<7>(kv, g, k0, n, ph, p_stride, ah); break;
      default: accumulate_v_rows_q8<8>(kv, g, k0, n, ph, p_stride, ah); break;
    }
  }
  return true;
}

}  // namespace

const AttnQuantOps& attn_quant_ops_avx512() {
  static const AttnQuantOps ops = {scores_q8, scores_q4, attn_quant_ops_avx2().load_row, attn_quant_ops_avx2().dot,
                                   accumulate_v, accumulate_v_rows};
  return ops;
}

}  // namespace weft
