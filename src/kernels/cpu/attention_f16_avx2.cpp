// AVX2/FMA/F16C primitives of the strict f16 attention kernel (see attention_f16_ops.h).
// Summation order matches the scalar twins: 8 lanes, pairwise lane reduction, scalar tail.
#include <immintrin.h>

#include <cmath>

#include "core/dtype.h"
#include "kernels/cpu/attention_f16_ops.h"

namespace weft {

namespace {

void load_f16_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

// lanes (0+4), (2+6), (1+5), (3+7) — the scalar twin's order.
inline float reduce_lanes(__m256 acc) {
  __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  __m128 s4 = _mm_add_ps(lo, hi);                    // [0+4, 1+5, 2+6, 3+7]
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // [(0+4)+(2+6), (1+5)+(3+7), ...]
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = reduce_lanes(acc);
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

// Four heads per pass share each load of the key row; per head the operations are exactly
// dot_avx2's (same lanes, same reduction, same tail), so the scores are bit-identical.
void scores_avx2(const float* q, int64_t group, const float* row, int64_t hd, float scale, float* s,
                 int64_t s_stride) {
  const int64_t hd8 = hd & ~int64_t(7);
  int64_t i = 0;
  for (; i + 4 <= group; i += 4) {
    const float* q0 = q + i * hd;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t d = 0; d < hd8; d += 8) {
      const __m256 k = _mm256_loadu_ps(row + d);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), k, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + hd + d), k, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 2 * hd + d), k, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 3 * hd + d), k, a3);
    }
    const float r[4] = {reduce_lanes(a0), reduce_lanes(a1), reduce_lanes(a2), reduce_lanes(a3)};
    for (int h = 0; h < 4; ++h) {
      float v = r[h];
      for (int64_t d = hd8; d < hd; ++d) v = std::fma(q0[h * hd + d], row[d], v);
      s[(i + h) * s_stride] = v * scale;
    }
  }
  for (; i < group; ++i) s[i * s_stride] = dot_avx2(q + i * hd, row, hd) * scale;
}

// H heads' accumulators for 8 dims stay in registers across a block of 16 rows, and each V row
// is widened once per 8 dims for all H heads. Per element the operation sequence is axpy's
// (acc = fma(p_j, v_j, acc), j ascending), so the result is bit-identical to the plain loop.
template <int H>
void accumulate_v_heads(const uint16_t* const* rows, int64_t n, const float* p, int64_t p_stride, int64_t hd,
                        float* acc) {
  constexpr int64_t kRowBlock = 16;
  for (int64_t j0 = 0; j0 < n; j0 += kRowBlock) {
    const int64_t j1 = j0 + kRowBlock < n ? j0 + kRowBlock : n;
    for (int64_t d = 0; d < hd; d += 8) {
      // The head loops must be unrolled so that a[] lives in registers: without the pragma
      // GCC -O2 keeps a[] on the stack and every FMA goes through memory (measured 2-3x slower).
      __m256 a[H];
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) a[h] = _mm256_loadu_ps(acc + h * hd + d);
      for (int64_t j = j0; j < j1; ++j) {
        const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + d)));
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + h * p_stride + j), v, a[h]);
      }
#pragma GCC unroll 8
      for (int h = 0; h < H; ++h) _mm256_storeu_ps(acc + h * hd + d, a[h]);
    }
  }
}

void axpy_avx2(float alpha, const float* x, float* y, int64_t n);

void accumulate_v_avx2(const uint16_t* const* rows, int64_t n, const float* p, int64_t p_stride, int64_t group,
                       int64_t hd, float* acc) {
  if (hd % 8 != 0) {  // rare head sizes: the plain row-by-row order
    float row[1024];
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t base = 0; base < hd; base += 1024) {
        const int64_t len = hd - base < 1024 ? hd - base : 1024;
        load_f16_avx2(rows[j] + base, row, len);
        for (int64_t i = 0; i < group; ++i) axpy_avx2(p[i * p_stride + j], row, acc + i * hd + base, len);
      }
    }
    return;
  }
  for (int64_t i = 0; i < group; i += 8) {
    const float* pi = p + i * p_stride;
    float* ai = acc + i * hd;
    switch (group - i < 8 ? group - i : 8) {
      case 1: accumulate_v_heads<1>(rows, n, pi, p_stride, hd, ai); break;
      case 2: accumulate_v_heads<2>(rows, n, pi, p_stride, hd, ai); break;
      case 3: accumulate_v_heads<3>(rows, n, pi, p_stride, hd, ai); break;
      case 4: accumulate_v_heads<4>(rows, n, pi, p_stride, hd, ai); break;
      case 5: accumulate_v_heads<5>(rows, n, pi, p_stride, hd, ai); break;
      case 6: accumulate_v_heads<6>(rows, n, pi, p_stride, hd, ai); break;
      case 7: accumulate_v_heads<7>(rows, n, pi, p_stride, hd, ai); break;
      default: accumulate_v_heads<8>(rows, n, pi, p_stride, hd, ai); break;
    }
  }
}

void axpy_avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(alpha, x[i], y[i]);
}

const AttnF16Ops kAvx2Ops = {load_f16_avx2, dot_avx2, axpy_avx2, scores_avx2, accumulate_v_avx2};

}  // namespace

const AttnF16Ops& attn_f16_ops_avx2() { return kAvx2Ops; }

}  // namespace weft
