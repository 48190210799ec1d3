// AVX2/FMA/F16C primitives of the quantized-KV attention kernel (see attention_quant.h): the
// scalar twins' float operations in the same order, so the same bits.
//
// K scores, lanes = heads: per key block the 8 heads' integer dots (maddubs + madd per head,
// then a transposing hadd tree; integer sums are exact in any order), one cvt and one fma per
// block for all 8 heads. The earlier form (one 8-lane float accumulator per head, a float
// reduction per head at the end) spent a cvt, a scale broadcast and an fma per head and block;
// that contract was replaced on 2026-12-01 (docs/results.md section 13, "CPU quantized-KV
// attention, round 2"). Softmax exp: attn_exp8, a vector twin of attn_exp.
// Speed: build/attention_quant_bench (a command, not a test).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/dtype.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/spread_prefetch.h"

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

// Eight int32 vectors (one per head, 8 partial sums each) -> one vector of the 8 heads' totals.
// Integer adds: exact in any order.
inline __m256i sum_per_head(const __m256i p[8]) {
  const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// attn_exp (attention_quant.h) on 8 lanes: the scalar twin's operations in its order. max_ps
// returns its second operand for NaN, as the twin's `x > min ? x : min` does.
inline __m256 attn_exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(kAttnExpMin));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kAttnLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kAttnLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kAttnLn2Lo), r);
  __m256 p = _mm256_set1_ps(kAttnExpP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kAttnExpP[i]));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

// Scores of up to 8 heads (one tile) against a q8_0 / q4_0 key row, lanes = heads: per block the
// 8 integer dots (q8_0: sign trick, |k| · sign(q, k) = k · q, since maddubs needs an unsigned
// operand; q4_0: the nibbles 0..15 are unsigned already, the +8 comes out through bias8), then
// one fma per block with d_q · d_k.
template <bool kQ4>
__m256 scores_tile(const uint8_t* row, const AttnQTile* tile, int64_t nb) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const AttnQTile& t = tile[b];
    __m256i p[8];
    float dk;
    if constexpr (kQ4) {
      const BlockQ4_0& k = reinterpret_cast<const BlockQ4_0*>(row)[b];
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(k.qs)), low4 = _mm_set1_epi8(0x0f);
      const __m256i ku = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
#pragma GCC unroll 8
      for (int h = 0; h < 8; ++h)
        p[h] = _mm256_madd_epi16(_mm256_maddubs_epi16(ku, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.qs[h]))), ones);
      dk = _cvtsh_ss(k.d);
    } else {
      const BlockQ8_0& k = reinterpret_cast<const BlockQ8_0*>(row)[b];
      const __m256i kq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.qs));
      const __m256i ka = _mm256_sign_epi8(kq, kq);
#pragma GCC unroll 8
      for (int h = 0; h < 8; ++h) {
        const __m256i qs = _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.qs[h])), kq);
        p[h] = _mm256_madd_epi16(_mm256_maddubs_epi16(ka, qs), ones);
      }
      dk = _cvtsh_ss(k.d);
    }
    __m256i dot = sum_per_head(p);
    if constexpr (kQ4) dot = _mm256_add_epi32(dot, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.bias8)));
    const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(t.d), _mm256_set1_ps(dk));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc);
  }
  return acc;
}

template <bool kQ4>
void scores_rows(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const AttnGroupQuery& q, float scale,
                 float* s) {
  alignas(32) float out[8];
  const __m256 sc = _mm256_set1_ps(scale);
  // Each key brings in the row kPrefetchKeys ahead (spread_prefetch.h says why: not as a burst).
  constexpr int64_t kPrefetchKeys = 16, kRun = 256;
  const uint8_t* k_run[kRun + kPrefetchKeys];  // rows j_run.. (k_rows: no division per key)
  int64_t j_run = -kRun;
  for (int64_t j = 0; j < n; ++j) {
    if (j >= j_run + kRun) {
      j_run = j;
      kv.k_rows(g, k0 + j, std::min(kRun + kPrefetchKeys, n - j), k_run);
    }
    const uint8_t* row = k_run[j - j_run];
    if (j + kPrefetchKeys < n) {
      const char* ahead = reinterpret_cast<const char*>(k_run[j - j_run + kPrefetchKeys]);
      for (size_t b = 0; b < kv.k_row_bytes; b += 64) __builtin_prefetch(ahead + b, 0, 2);
    }
    for (int64_t h0 = 0; h0 < q.group; h0 += 8) {
      _mm256_store_ps(out, _mm256_mul_ps(scores_tile<kQ4>(row, q.tiles + (h0 / 8) * q.nb, q.nb), sc));
      for (int64_t h = 0; h < 8 && h0 + h < q.group; ++h) s[(h0 + h) * n + j] = out[h];
    }
  }
}

void scores_avx2(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const AttnGroupQuery& q, float scale,
                 float* s) {
  if (kv.k_type == DType::kQ4_0) scores_rows<true>(kv, g, k0, n, q, scale, s);
  else scores_rows<false>(kv, g, k0, n, q, scale, s);
}

float exp_sum_avx2(float* x, int64_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = attn_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
    _mm256_storeu_ps(x + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = reduce8(acc);
  for (; j < n; ++j) {
    x[j] = attn_exp(x[j] - m);
    sum += x[j];
  }
  return sum;
}

void load_row_avx2(DType type, const uint8_t* row, float* dst, int64_t n) {
  if (type == DType::kF16) {
    const auto* src = reinterpret_cast<const uint16_t*>(row);
    for (int64_t i = 0; i < n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  } else if (type == DType::kQ8_0) {
    const auto* x = reinterpret_cast<const BlockQ8_0*>(row);
    for (int64_t b = 0; b < n / 32; ++b) {
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d));
      for (int j = 0; j < 32; j += 8) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[b].qs + j));
        _mm256_storeu_ps(dst + b * 32 + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
      }
    }
  } else {  // q4_0
    const auto* x = reinterpret_cast<const BlockQ4_0*>(row);
    const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t b = 0; b < n / 32; ++b) {
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d));
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
  for_head_tiles<4>(group, [&](int64_t h, auto nh) {
    accumulate_v_tile<decltype(nh)::value>(v, n, p + h * p_stride, p_stride, hd, acc + h * hd);
  });
}

// pv_quant (attention_quant.h) for NH <= 8 heads: per 64-key tile and 32-value block, the heads'
// weights x = p·d (lanes = heads, from the tile's p transposed once), the scale bound and the
// 16-bit (w_a, w_b) pair of each key pair; then per 8-dim quarter of the block, per key pair the two
// rows' 8 codes interleaved and widened to 16 bits once for all heads, and per head one vpmaddwd
// (16 exact products) and one add into int32 sums held in registers across the tile. The next
// tile's rows are prefetched a line per row step (spread_prefetch.h).
template <bool kQ4>
inline __m128i v_codes8(const uint8_t* row, int64_t b, int c) {
  if constexpr (kQ4) {
    const BlockQ4_0& v = reinterpret_cast<const BlockQ4_0*>(row)[b];
    const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v.qs + 8 * (c & 1)));
    const __m128i nib = _mm_and_si128(c >= 2 ? _mm_srli_epi16(raw, 4) : raw, _mm_set1_epi8(0x0f));
    return _mm_sub_epi8(nib, _mm_set1_epi8(8));
  } else {
    return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(reinterpret_cast<const BlockQ8_0*>(row)[b].qs + 8 * c));
  }
}

template <bool kQ4, int NH>
void pv_quant_heads(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
                    float* acc) {
  constexpr int64_t kT = kAttnPvKeys;
  const int64_t hd = kv.head_dim;
  const uint8_t* rows[kT];
  const uint8_t* next[kT];
  alignas(32) float pt[kT][8];       // the tile's p, [key][head]
  alignas(32) float x[kT][8];        // p·d of the current block, [key][head]
  alignas(32) int32_t w[kT / 2][8];  // (w_a, w_b) 16-bit pairs per key pair, [pair][head]
  kv.v_rows(g, k0, std::min(kT, n), next);
  for (int64_t j0 = 0; j0 < n; j0 += kT) {
    const int64_t nt = std::min(kT, n - j0), nn = std::min(kT, n - j0 - nt);
    std::copy(next, next + nt, rows);
    kv.v_rows(g, k0 + j0 + nt, nn, next);
    SpreadPrefetch<uint8_t> pf(next, nn, int64_t(kv.v_row_bytes));
    // The tile's p, [key][head], and each head's largest (max_ps(p, m) is std::max(m, p)).
    __m256 pmax = _mm256_setzero_ps();
    for (int64_t j = 0; j < nt; ++j) {
      for (int i = 0; i < 8; ++i) pt[j][i] = i < NH ? p[i * p_stride + j0 + j] : 0.0f;
      pmax = _mm256_max_ps(_mm256_load_ps(pt[j]), pmax);
    }
    // attn_pv_head_scale per lane.
    const __m256 big = _mm256_set1_ps(32767.0f);
    const __m256 ok = _mm256_cmp_ps(pmax, _mm256_set1_ps(kAttnPvFloor), _CMP_GE_OQ);
    const __m256 h_inv = _mm256_and_ps(ok, _mm256_div_ps(big, pmax)), h_out = _mm256_and_ps(ok, _mm256_div_ps(pmax, big));
    for (int64_t b = 0; b < hd / 32; ++b) {
      float dmax = 0.0f;
      for (int64_t j = 0; j < nt; ++j) {
        pf.step(1);
        const uint16_t d16 = kQ4 ? reinterpret_cast<const BlockQ4_0*>(rows[j])[b].d : reinterpret_cast<const BlockQ8_0*>(rows[j])[b].d;
        const float dj = _cvtsh_ss(d16);
        dmax = std::max(dmax, std::fabs(dj));
        _mm256_store_ps(x[j], _mm256_mul_ps(_mm256_load_ps(pt[j]), _mm256_set1_ps(dj)));
      }
      const AttnPvScale blk = attn_pv_block_scale(dmax);
      const __m256 inv = _mm256_mul_ps(h_inv, _mm256_set1_ps(blk.inv));
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_mul_ps(h_out, _mm256_set1_ps(blk.out)));
      for (int64_t j = 0; j < nt; j += 2) {
        const __m256i wa = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(x[j]), inv));
        const __m256i wb = j + 1 < nt ? _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(x[j + 1]), inv))
                                      : _mm256_setzero_si256();
        _mm256_store_si256(reinterpret_cast<__m256i*>(w[j / 2]), _mm256_blend_epi16(wa, _mm256_slli_epi32(wb, 16), 0xaa));
      }
      for (int c = 0; c < 4; ++c) {
        __m256i a[NH];
#pragma GCC unroll 8
        for (int i = 0; i < NH; ++i) a[i] = _mm256_setzero_si256();
        for (int64_t j = 0; j < nt; j += 2) {
          const __m128i ca = v_codes8<kQ4>(rows[j], b, c);
          const __m128i cb = j + 1 < nt ? v_codes8<kQ4>(rows[j + 1], b, c) : _mm_setzero_si128();
          const __m256i v = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(ca, cb));  // (a, b) per dim, in order
          const int32_t* wj = w[j / 2];
#pragma GCC unroll 8
          for (int i = 0; i < NH; ++i) a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(v, _mm256_set1_epi32(wj[i])));
        }
        float* ab = acc + 32 * b + 8 * c;
#pragma GCC unroll 8
        for (int i = 0; i < NH; ++i)
          _mm256_storeu_ps(ab + i * hd, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a[i]), _mm256_broadcast_ss(out + i),
                                                        _mm256_loadu_ps(ab + i * hd)));
      }
    }
  }
}

void pv_quant_avx2(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
                   int64_t group, float* acc) {
  const int64_t hd = kv.head_dim;
  const bool q4 = kv.v_type == DType::kQ4_0;
  for_head_tiles<8>(group, [&](int64_t h, auto nh) {
    constexpr int NH = decltype(nh)::value;
    if (q4) pv_quant_heads<true, NH>(kv, g, k0, n, p + h * p_stride, p_stride, acc + h * hd);
    else pv_quant_heads<false, NH>(kv, g, k0, n, p + h * p_stride, p_stride, acc + h * hd);
  });
}

const AttnQuantOps kAvx2Ops = {scores_avx2, exp_sum_avx2, load_row_avx2, dot_avx2, accumulate_v_avx2, pv_quant_avx2};

}  // namespace

const AttnQuantOps& attn_quant_ops_avx2() { return kAvx2Ops; }

}  // namespace weft
