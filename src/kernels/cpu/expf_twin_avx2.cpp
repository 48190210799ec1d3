// glibc's expf, 8 lanes at a time on AVX2 + FMA (expf_twin.h). Each step below is one
// instruction of glibc's __expf_fma, in its order, on 4 doubles per register; only the five
// products glibc's FMA build fuses are fused, the rest are separate roundings.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/expf_twin.h"
#include "kernels/cpu/expf_twin_data.h"

namespace weft {

namespace {

using namespace expf_twin_data;

// expf of 4 doubles that came from floats with |x| < 88 (the caller masks the others).
inline __m128 expf4(__m256d xd) {
  const __m256d inv = _mm256_set1_pd(kInvLn2N), shift = _mm256_set1_pd(kShift);
  __m256d kd = _mm256_fmadd_pd(inv, xd, shift);        // z + shift, z = x·32/ln2 unrounded
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, shift);                        // k
  const __m256d r = _mm256_fmsub_pd(inv, xd, kd);       // z − k
  const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kTable), idx, 8);
  t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));  // 2^(k/32)
  const __m256d s = _mm256_castsi256_pd(t);
  const __m256d p = _mm256_fmadd_pd(r, _mm256_set1_pd(kC0), _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(kC2), _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(p, r2, y);
  y = _mm256_mul_pd(y, s);
  return _mm256_cvtpd_ps(y);
}

// Lanes glibc sends to its special cases (|x| >= 88, inf, NaN): asuint(x) >> 20 & 0x7ff > 0x42a.
inline int special_mask(__m256 x) {
  const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
  return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(int(kTopLimit)))));
}

inline __m256 expf8(__m256 x) {
  const __m128 lo = expf4(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
  const __m128 hi = expf4(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
  return _mm256_set_m128(hi, lo);
}

// 8 lanes of x to y, the rare special lanes through std::exp.
inline void expf8_store(__m256 x, float* y) {
  if (special_mask(x) == 0) {
    _mm256_storeu_ps(y, expf8(x));
    return;
  }
  alignas(32) float v[8];
  _mm256_store_ps(v, x);
  for (int i = 0; i < 8; ++i) y[i] = std::exp(v[i]);
}

}  // namespace

void expf_twin_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) expf8_store(_mm256_loadu_ps(x + i), y + i);
  for (; i < n; ++i) y[i] = std::exp(x[i]);
}

void exp_sub_avx2(float* s, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) expf8_store(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv), s + i);
  for (; i < n; ++i) s[i] = std::exp(s[i] - m);
}

}  // namespace weft
