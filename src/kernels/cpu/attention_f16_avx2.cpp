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

float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  // lanes (0+4), (2+6), (1+5), (3+7) — the scalar twin's order.
  __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  __m128 s4 = _mm_add_ps(lo, hi);                    // [0+4, 1+5, 2+6, 3+7]
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // [(0+4)+(2+6), (1+5)+(3+7), ...]
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  float s = _mm_cvtss_f32(s1);
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

void axpy_avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(alpha, x[i], y[i]);
}

const AttnF16Ops kAvx2Ops = {load_f16_avx2, dot_avx2, axpy_avx2};

}  // namespace

const AttnF16Ops& attn_f16_ops_avx2() { return kAvx2Ops; }

}  // namespace weft
