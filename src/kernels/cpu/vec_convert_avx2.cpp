// AVX2/F16C row conversions f16/bf16 <-> f32; bit-identical to the scalar versions.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/vec_convert.h"

namespace weft {

void convert_row_to_f32_avx2(DType src_type, const void* src, float* dst, int64_t n) {
  if (src_type != DType::kF16 && src_type != DType::kBF16) {
    convert_row_to_f32_scalar(src_type, src, dst, n);
    return;
  }
  const auto* p = static_cast<const uint8_t*>(src);
  int64_t i = 0;
  if (src_type == DType::kF16) {
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
      __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(bits));
    }
  }
  // The tail goes through the scalar code, which is exact, so it matches the vector lanes.
  if (i < n) convert_row_to_f32_scalar(src_type, p + 2 * i, dst + i, n - i);
}

void convert_row_f32_to_f16_avx2(const float* src, uint16_t* dst, int64_t n) {
  const __m256i sign_mask = _mm256_set1_epi32(0x8000);
  const __m256i quiet_nan = _mm256_set1_epi32(0x7e00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    // F16C keeps NaN payloads; the scalar reference writes the canonical sign|0x7e00 instead.
    __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    __m256i canon = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16), sign_mask), quiet_nan);
    __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(is_nan),
                                    _mm256_extracti128_si256(is_nan, 1));
    __m128i canon16 = _mm_packus_epi32(_mm256_castsi256_si128(canon),
                                       _mm256_extracti128_si256(canon, 1));
    h = _mm_blendv_epi8(h, canon16, nan16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  if (i < n) convert_row_f32_to_f16_scalar(src + i, dst + i, n - i);
}

void convert_row_f32_to_bf16_avx2(const float* src, uint16_t* dst, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_bits = _mm256_set1_epi32(0x7f800000);
  const __m256i half_minus_one = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet_bit = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i out[2];
    for (int half = 0; half < 2; ++half) {
      __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(src + i + 8 * half));
      // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
      __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
      __m256i rounded =
          _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(half_minus_one, lsb)), 16);
      // NaN keeps its top bits and is forced quiet, as in weft::f32_to_bf16.
      __m256i nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet_bit);
      __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), inf_bits);
      out[half] = _mm256_and_si256(_mm256_blendv_epi8(rounded, nan, is_nan),
                                   _mm256_set1_epi32(0xffff));
    }
    // packus works per 128-bit lane; the permute puts the four 64-bit groups back in order.
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(out[0], out[1]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  if (i < n) convert_row_f32_to_bf16_scalar(src + i, dst + i, n - i);
}

}  // namespace weft
