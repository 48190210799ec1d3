// glibc's expf, 16 lanes at a time on AVX-512F (expf_twin.h): the AVX2 twin's steps on 8 doubles
// per register, the table looked up by two in-register permutes instead of a gather.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -W(maybe-)uninitialized
// reports at every inlined use (GCC bug 105593, fixed in GCC 13; as in matmul_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cmath>

#include "kernels/cpu/expf_twin.h"
#include "kernels/cpu/expf_twin_data.h"

namespace weft {

namespace {

using namespace expf_twin_data;

struct Table {
  __m512i t0, t1, t2, t3;  // entries 0-7, 8-15, 16-23, 24-31
};

inline Table load_table() {
  const auto* p = reinterpret_cast<const void*>(kTable);
  return {_mm512_loadu_si512(p), _mm512_loadu_si512(reinterpret_cast<const char*>(p) + 64),
          _mm512_loadu_si512(reinterpret_cast<const char*>(p) + 128),
          _mm512_loadu_si512(reinterpret_cast<const char*>(p) + 192)};
}

inline __m256 expf8(__m512d xd, const Table& tab) {
  const __m512d inv = _mm512_set1_pd(kInvLn2N), shift = _mm512_set1_pd(kShift);
  __m512d kd = _mm512_fmadd_pd(inv, xd, shift);
  const __m512i ki = _mm512_castpd_si512(kd);
  kd = _mm512_sub_pd(kd, shift);
  const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
  // Entry ki & 31: bits 0-3 pick within a 16-entry pair, bit 4 picks the pair.
  const __m512i lo = _mm512_permutex2var_epi64(tab.t0, ki, tab.t1);
  const __m512i hi = _mm512_permutex2var_epi64(tab.t2, ki, tab.t3);
  const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
  __m512i t = _mm512_mask_blend_epi64(upper, lo, hi);
  t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
  const __m512d s = _mm512_castsi512_pd(t);
  const __m512d p = _mm512_fmadd_pd(r, _mm512_set1_pd(kC0), _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(kC2), _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(p, r2, y);
  y = _mm512_mul_pd(y, s);
  return _mm512_cvtpd_ps(y);
}

inline __mmask16 special_mask(__m512 x) {
  const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
  return _mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(int(kTopLimit)));
}

inline void expf16_store(__m512 x, float* y, const Table& tab) {
  if (special_mask(x) == 0) {
    const __m256 lo = expf8(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), tab);
    const __m256 hi = expf8(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)), tab);
    _mm512_storeu_ps(y, _mm512_insertf32x8(_mm512_zextps256_ps512(lo), hi, 1));
    return;
  }
  alignas(64) float v[16];
  _mm512_store_ps(v, x);
  for (int i = 0; i < 16; ++i) y[i] = std::exp(v[i]);
}

}  // namespace

void expf_twin_avx512(const float* x, float* y, int64_t n) {
  const Table tab = load_table();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) expf16_store(_mm512_loadu_ps(x + i), y + i, tab);
  for (; i < n; ++i) y[i] = std::exp(x[i]);
}

void exp_sub_avx512(float* s, int64_t n, float m) {
  const Table tab = load_table();
  const __m512 mv = _mm512_set1_ps(m);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) expf16_store(_mm512_sub_ps(_mm512_loadu_ps(s + i), mv), s + i, tab);
  for (; i < n; ++i) s[i] = std::exp(s[i] - m);
}

}  // namespace weft
