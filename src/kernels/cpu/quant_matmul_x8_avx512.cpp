// The q4_K / q5_K / q8_0 x8 kernels (AVX-512 VNNI in 256-bit registers): eight rows of a
// repacked group (quant_repack.h) per pass, lane r of every register belonging to row r.
//
// Same integers, same float steps as the one-row kernel (quant_matmul.h's contract), only
// transposed: register j holds, for the eight rows, the contract's lane j
//   S_j = sum_s sc[s] * sum_{i = 4j..4j+3} q[32s+i] * x[32s+i]   (exact int32)
//   M_j = m[j] * (bsums[2j] + bsums[2j+1])
// and acc_j = fma(float(S_j), d * dx, acc_j); acc_j = fma(-float(M_j), dmin * dx, acc_j) per
// super-block, lane for lane what the one-row kernel does in its lane j. The final reduction
// s4_i = acc_i + acc_{i+4}, s2_i = s4_i + s4_{i+2}, s2_0 + s2_1 becomes adds of whole registers,
// leaving the eight outputs in one register. So every output is bit-identical to the one-row
// kernels on the plain layout (tests/quant_repack_test.cpp). q8_0 is the same with its contract:
// register j = the exact block integer I[b][j] of eight rows, one fma per block.
//
// Per 32-byte code register (four codes of eight rows, low nibbles one sub-block, high nibbles
// the next): and, shift, and, two vpmaddubsw against 4-byte activation broadcasts, two vpdpwssd
// against the sub-block's scales; the scales of a sub-block for all eight rows are one vpshufb
// per super-block instead of one per row, and the 6-bit scale unpack is vector code.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_repack.h"

namespace weft {

namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// vpshufb mask giving, in each 128-bit lane, dword r' = the int16 pair (byte 4s + r', byte 4s + r')
// zero-extended: the scale (or min) of sub-block s for the lane's four rows, twice.
inline __m256i pair_mask(int s) {
  const int b = 4 * s;
  return _mm256_setr_epi8(char(b), char(0x80), char(b), char(0x80), char(b + 1), char(0x80), char(b + 1), char(0x80),
                          char(b + 2), char(0x80), char(b + 2), char(0x80), char(b + 3), char(0x80), char(b + 3),
                          char(0x80), char(b), char(0x80), char(b), char(0x80), char(b + 1), char(0x80), char(b + 1),
                          char(0x80), char(b + 2), char(0x80), char(b + 2), char(0x80), char(b + 3), char(0x80),
                          char(b + 3), char(0x80));
}

// One token against `groups` groups: out[8g + r]. q5_K adds 16 to a code where its fifth bit
// (bit s of the row's qh byte for that position) is set: vptestmb + masked vpaddb, as the
// one-row VNNI kernel does.
template <GgmlType W>
void dot_groups_one(const uint8_t* w, size_t row_bytes, int64_t groups, const BlockQ8_K* xb, int64_t K, float* out) {
  constexpr bool kQ5 = W == GgmlType::kQ5_K;
  constexpr size_t kColumn = kX8GroupRows * (kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
  constexpr size_t kCodes = kQ5 ? 128 + 256 : 128;
  const __m256i b16 = _mm256_set1_epi8(0x10);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m3f = _mm256_set1_epi8(0x3F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const int64_t nb = K / kQK_K;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* col = w + size_t(g) * kX8GroupRows * row_bytes;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, col += kColumn) {
      const BlockQ8_K& x = xb[b];
      const __m256 dx = _mm256_set1_ps(x.d);
      const __m256 dv = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col))), dx);
      const __m256 dminv =
          _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col + 16))), dx);
      const __m256i raw0 = load32(col + 32), raw1 = load32(col + 64), mn = load32(col + 96);
      const __m256i sc[2] = {_mm256_and_si256(raw0, m3f), _mm256_and_si256(raw1, m3f)};
      const __m256i mins[2] = {
          _mm256_or_si256(_mm256_and_si256(mn, m4), _mm256_and_si256(_mm256_srli_epi16(raw0, 2), m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(mn, 4), m4), _mm256_and_si256(_mm256_srli_epi16(raw1, 2), m30))};
      // Two integer accumulators per lane j (chunks 0-1 and 2-3): vpdpwssd chains of 4, not 8.
      __m256i S[2][8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) S[0][j] = S[1][j] = _mm256_setzero_si256();
      const uint8_t* codes = col + kCodes;
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i s0 = _mm256_shuffle_epi8(sc[(2 * c) / 4], pair_mask((2 * c) % 4));
        const __m256i s1 = _mm256_shuffle_epi8(sc[(2 * c + 1) / 4], pair_mask((2 * c + 1) % 4));
        const int8_t* xa = x.qs + 64 * c;
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          const __m256i q = load32(codes + 32 * (8 * c + j));
          __m256i lo = _mm256_and_si256(q, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          if constexpr (kQ5) {
            const __m256i qh = load32(col + 128 + 32 * j);
            lo = _mm256_mask_add_epi8(lo, _mm256_test_epi8_mask(qh, _mm256_set1_epi8(char(1 << (2 * c)))), lo, b16);
            hi = _mm256_mask_add_epi8(hi, _mm256_test_epi8_mask(qh, _mm256_set1_epi8(char(1 << (2 * c + 1)))), hi, b16);
          }
          __m256i& s = S[c / 2][j];
          s = _mm256_dpwssd_epi32(s, _mm256_maddubs_epi16(lo, bcast32(xa + 4 * j)), s0);
          s = _mm256_dpwssd_epi32(s, _mm256_maddubs_epi16(hi, bcast32(xa + 32 + 4 * j)), s1);
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m256i mpair = _mm256_shuffle_epi8(mins[j / 4], pair_mask(j % 4));
        const __m256i M = _mm256_madd_epi16(mpair, bcast32(x.bsums + 2 * j));  // m[j] * (bsums[2j] + bsums[2j+1])
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(S[0][j], S[1][j])), dv, acc[j]);
        acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), dminv, acc[j]);
      }
    }
    __m256 s4[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) s4[i] = _mm256_add_ps(acc[i], acc[i + 4]);
    const __m256 s2a = _mm256_add_ps(s4[0], s4[2]), s2b = _mm256_add_ps(s4[1], s4[3]);
    _mm256_storeu_ps(out + kX8GroupRows * g, _mm256_add_ps(s2a, s2b));
  }
}

// q8_0: per block, register j holds the eight rows' lane j, the exact I[b][j] (vpdpbusd of |w|
// and sign(x, w) from zero, as the one-row kernel), then acc_j = fma(float(I), dw * dx, acc_j).
void dot_groups_one_q8_0(const uint8_t* w, size_t row_bytes, int64_t groups, const BlockQ8_0* xb, int64_t K,
                         float* out) {
  constexpr size_t kColumn = kX8GroupRows * sizeof(BlockQ8_0);
  const int64_t nb = K / kQK32;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* col = w + size_t(g) * kX8GroupRows * row_bytes;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, col += kColumn) {
      const __m256 dv = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col))),
                                      _mm256_set1_ps(_cvtsh_ss(xb[b].d)));
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m256i q = load32(col + 16 + 32 * j);
        const __m256i xs = _mm256_sign_epi8(bcast32(xb[b].qs + 4 * j), q);
        const __m256i isum = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(q, q), xs);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dv, acc[j]);
      }
    }
    __m256 s4[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) s4[i] = _mm256_add_ps(acc[i], acc[i + 4]);
    const __m256 s2a = _mm256_add_ps(s4[0], s4[2]), s2b = _mm256_add_ps(s4[1], s4[3]);
    _mm256_storeu_ps(out + kX8GroupRows * g, _mm256_add_ps(s2a, s2b));
  }
}

template <GgmlType W>
void dot_groups(const uint8_t* w, size_t row_bytes, int64_t groups, const uint8_t* xq, size_t xq_stride,
                int64_t ntok, int64_t K, float* out, int64_t ldo) {
  // Every token passes over one group (8 rows x K: a few KiB, in L1) before the next group.
  // Prefill this way (quant_bench --t 64, 2048 x 2048, one thread) against the one-row kernel's
  // 4-token tiles on plain rows: q4_K 3.66 vs 3.87 ms, q8_0 5.19 vs 6.80, q5_K 5.0 vs 4.4 (its
  // fifth-bit ops are paid per token here, once per tile there); unpacking each group back to
  // plain rows for the tiles instead was 12-18% slower than plain for all three.
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* wg = w + size_t(g) * kX8GroupRows * row_bytes;
    for (int64_t t = 0; t < ntok; ++t) {
      float* o = out + t * ldo + kX8GroupRows * g;
      if constexpr (W == GgmlType::kQ8_0) {
        dot_groups_one_q8_0(wg, row_bytes, 1, reinterpret_cast<const BlockQ8_0*>(xq + size_t(t) * xq_stride), K, o);
      } else {
        dot_groups_one<W>(wg, row_bytes, 1, reinterpret_cast<const BlockQ8_K*>(xq + size_t(t) * xq_stride), K, o);
      }
    }
  }
}

}  // namespace

QuantDotGroupsFn quant_dot_groups_avx512(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ4_K: return dot_groups<GgmlType::kQ4_K>;
    case GgmlType::kQ5_K: return dot_groups<GgmlType::kQ5_K>;
    case GgmlType::kQ8_0: return dot_groups<GgmlType::kQ8_0>;
    default: return nullptr;
  }
}

}  // namespace weft
