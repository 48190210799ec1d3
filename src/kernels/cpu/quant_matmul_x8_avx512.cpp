// The q4_K / q5_K / q6_K / q8_0 x8 kernels (AVX-512 VNNI in 256-bit registers): eight rows of a
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
// q6_K is the same with its contract (quant_matmul.h): S_j starts at the -32 offset term, codes
// are rebuilt from transposed ql / qh as the one-row kernel rebuilds them (q6_codes), one fma per
// super-block.
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
#include "kernels/cpu/quant_simd_rows.h"

namespace weft {

namespace {

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

// The 6-bit scales and mins of a q4_K / q5_K group column as bytes: sc[h] byte e = scale entry
// 32h + e, mins[h] likewise (quant_repack.h's layout).
// The masks come from the caller, made once outside its loops (made here, the one-token q4_K kernel
// ran 5% slower from L2).
struct K4Masks {
  __m256i m4 = _mm256_set1_epi8(0x0F), m3f = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
};
inline void k4_scales(const uint8_t* col, const K4Masks& k, __m256i sc[2], __m256i mins[2]) {
  const __m256i m4 = k.m4, m3f = k.m3f, m30 = k.m30;
  const __m256i raw0 = load32(col + 32), raw1 = load32(col + 64), mn = load32(col + 96);
  sc[0] = _mm256_and_si256(raw0, m3f);
  sc[1] = _mm256_and_si256(raw1, m3f);
  mins[0] = _mm256_or_si256(_mm256_and_si256(mn, m4), _mm256_and_si256(_mm256_srli_epi16(raw0, 2), m30));
  mins[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(mn, 4), m4), _mm256_and_si256(_mm256_srli_epi16(raw1, 2), m30));
}

// The eight rows' f16 scales at p times each token's activation scale.
template <int C>
inline void scale_by_tokens(const uint8_t* p, const BlockQ8_K* const* xb, int64_t b, __m256 out[C]) {
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#pragma GCC unroll 4
  for (int t = 0; t < C; ++t) out[t] = _mm256_mul_ps(d, _mm256_set1_ps(xb[t][b].d));
}

// The one-token forms stream a group's column once, start to end: prefetch_ahead
// (quant_simd_rows.h, 2 KiB ahead, one block's worth per block) keeps more lines in flight than
// the hardware prefetcher alone: measured on a Xeon with `quant_bench` (N = K = 4096, weights
// cycled over 128 MiB), before / after alternated at 2 threads: q8_0@x8 20.5-20.8 -> 25.8-26.2
// GB/s (1 KiB ahead: 23.4; 3 KiB: 25.1; 4 KiB: 23.4), q4_K@x8 20.6-21.0 -> 23.2-23.7. q6_K's form
// is left without it: no gain was shown there (q6_K@x8 read 20-21 GB/s with and without it in
// the after tree, 23-24 in the tree before, where it runs after q8_0@x8 in the same process).

// One token against one group: out[r]. q5_K adds 16 to a code where its fifth bit
// (bit s of the row's qh byte for that position) is set: vptestmb + masked vpaddb, as the
// one-row VNNI kernel does.
template <GgmlType W>
void dot_group_one(const uint8_t* col, const BlockQ8_K* xb, int64_t K, float* out) {
  constexpr bool kQ5 = W == GgmlType::kQ5_K;
  constexpr size_t kColumn = kX8GroupRows * (kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
  constexpr size_t kCodes = kQ5 ? 128 + 256 : 128;
  const __m256i b16 = _mm256_set1_epi8(0x10);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const K4Masks masks;
  const int64_t nb = K / kQK_K;
  __m256 acc[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  const size_t ahead = quant_prefetch_ahead();
  for (int64_t b = 0; b < nb; ++b, col += kColumn) {
    prefetch_ahead(col, kColumn, ahead);
    const BlockQ8_K& x = xb[b];
    const __m256 dx = _mm256_set1_ps(x.d);
    const __m256 dv = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col))), dx);
    const __m256 dminv =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col + 16))), dx);
    __m256i sc[2], mins[2];
    k4_scales(col, masks, sc, mins);
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
  store_reduced8(acc, out);
}

// q8_0: per block, register j holds the eight rows' lane j, the exact I[b][j] (vpdpbusd of |w|
// and sign(x, w) from zero, as the one-row kernel), then acc_j = fma(float(I), dw * dx, acc_j).
#ifndef WEFT_Q8_AHEAD
#define WEFT_Q8_AHEAD 3072
#endif
constexpr size_t kQ8Ahead = WEFT_Q8_AHEAD;
void dot_group_one_q8_0(const uint8_t* col, const BlockQ8_0* xb, int64_t K, float* out) {
  constexpr size_t kColumn = kX8GroupRows * sizeof(BlockQ8_0);
  const int64_t nb = K / kQK32;
  __m256 acc[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  const size_t ahead = quant_prefetch_ahead();
  for (int64_t b = 0; b < nb; ++b, col += kColumn) {
    prefetch_ahead(col, kColumn, ahead);
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
  store_reduced8(acc, out);
}

// vpshufb mask on a register of int16 scales (per 128-bit lane: entries 0-3 the lane's four rows'
// scale of one sub-block, 4-7 of the next): dword r' = (entry a + r', entry b + r').
inline __m256i int16_pair_mask(int a, int b) {
  char m[32];
  for (int lane = 0; lane < 2; ++lane)
    for (int r = 0; r < 4; ++r) {
      char* d = m + 16 * lane + 4 * r;
      d[0] = char(2 * (a + r)), d[1] = char(2 * (a + r) + 1), d[2] = char(2 * (b + r)), d[3] = char(2 * (b + r) + 1);
    }
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m));
}

// q6_K: lane j of the eight rows, the contract's
//   S_j = sum_g sc[2g + j/4] * (codes . x over elements 32g + 4j .. 32g + 4j + 3)
//         - 32 * (sc[2j] * bsums[2j] + sc[2j+1] * bsums[2j+1])
// then acc_j = fma(float(S_j), d * dx, acc_j). Codes are rebuilt from the transposed ql / qh
// dwords exactly as the one-row kernel rebuilds them from its 32-byte loads (position j of ql0,
// ql1, qh gives four 32-value groups of half h); a group's int16 scales are one vpmovsxbw for the
// eight rows, the (sc, sc) pairs one vpshufb each.
void dot_group_one_q6_K(const uint8_t* col, const BlockQ8_K* xb, int64_t K, float* out) {
  constexpr size_t kColumn = kX8GroupRows * sizeof(BlockQ6_K);
  constexpr size_t kScales = 16, kCodes = kScales + 128;  // codes: 96 bytes per (h, j)
  const __m256i same[2] = {int16_pair_mask(0, 0), int16_pair_mask(4, 4)};  // (sc[2g+u], sc[2g+u])
  const __m256i both = int16_pair_mask(0, 4);                               // (sc[2j], sc[2j+1])
  const int64_t nb = K / kQK_K;
  __m256 acc[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, col += kColumn) {  // (no prefetch_ahead: see there)
    const BlockQ8_K& x = xb[b];
    const __m256 dv = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col))),
                                    _mm256_set1_ps(x.d));
    auto scales = [&](int grp) {
      return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col + kScales + 16 * grp)));
    };
    // Two integer accumulators per lane j (groups 0-1 and 2-3 of each half); the first starts
    // at the offset term.
    __m256i S[2][8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i M = _mm256_madd_epi16(_mm256_shuffle_epi8(scales(j), both), bcast32(x.bsums + 2 * j));
      S[0][j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(M, 5));
      S[1][j] = _mm256_setzero_si256();
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int u = 0; u < 2; ++u) {
        __m256i sp[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) sp[i] = _mm256_shuffle_epi8(scales(4 * h + i), same[u]);
#pragma GCC unroll 4
        for (int jj = 0; jj < 4; ++jj) {
          const int j = 4 * u + jj;
          __m256i q[4];
          const uint8_t* qp = col + kCodes + 96 * (8 * h + j);
          q6_codes(load32(qp), load32(qp + 32), load32(qp + 64), q);
          const int8_t* xa = x.qs + 128 * h + 4 * j;
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            __m256i& s = S[i / 2][j];
            s = _mm256_dpwssd_epi32(s, _mm256_maddubs_epi16(q[i], bcast32(xa + 32 * i)), sp[i]);
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(S[0][j], S[1][j])), dv, acc[j]);
  }
  store_reduced8(acc, out);
}

// Prefill: C tokens against one group (q4_K / q5_K: lane j outer; q6_K: half, then lane, the
// column's storage order), so each code register is loaded and unpacked once for the C tokens (the one-token kernels above unpack it once per token, which
// made the x8 q5_K prefill 14% slower than the one-row kernel's token tiles, and q6_K's unpack is
// heavier still). Per output the same integers and the same float steps in the same order as the
// one-token kernels; only the loop order around them changes. The one-token kernels stay a
// separate shape for speed: they keep all eight lanes' integer accumulators in registers (the
// tiles run out of registers for that at 4 tokens); a tile of one token as the decode kernel was
// 10% slower for q6_K (36.6 vs 40.7 GB/s from L2) and 35% slower for q4_K (an earlier lane-outer
// q4_K tile, 23 vs 36-39 GB/s).
template <GgmlType W, int C>
void dot_group_tile_k4(const uint8_t* col, const BlockQ8_K* const* xb, int64_t K, float* out, int64_t ldo) {
  constexpr bool kQ5 = W == GgmlType::kQ5_K;
  constexpr size_t kColumn = kX8GroupRows * (kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
  constexpr size_t kCodes = kQ5 ? 128 + 256 : 128;
  const __m256i b16 = _mm256_set1_epi8(0x10), m4 = _mm256_set1_epi8(0x0F);
  const K4Masks masks;
  __m256 acc[C][8];
#pragma GCC unroll 4
  for (int t = 0; t < C; ++t)
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[t][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < K / kQK_K; ++b, col += kColumn) {
    __m256 dv[C], dminv[C];
    scale_by_tokens<C>(col, xb, b, dv);
    scale_by_tokens<C>(col + 16, xb, b, dminv);
    __m256i sc[2], mins[2], sp[8];
    k4_scales(col, masks, sc, mins);
#pragma GCC unroll 8
    for (int sb = 0; sb < 8; ++sb) sp[sb] = _mm256_shuffle_epi8(sc[sb / 4], pair_mask(sb % 4));
    for (int j = 0; j < 8; ++j) {
      __m256i S[C];
#pragma GCC unroll 4
      for (int t = 0; t < C; ++t) S[t] = _mm256_setzero_si256();
      __m256i qh;
      if constexpr (kQ5) qh = load32(col + 128 + 32 * j);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i q = load32(col + kCodes + 32 * (8 * c + j));
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if constexpr (kQ5) {
          lo = _mm256_mask_add_epi8(lo, _mm256_test_epi8_mask(qh, _mm256_set1_epi8(char(1 << (2 * c)))), lo, b16);
          hi = _mm256_mask_add_epi8(hi, _mm256_test_epi8_mask(qh, _mm256_set1_epi8(char(1 << (2 * c + 1)))), hi, b16);
        }
#pragma GCC unroll 4
        for (int t = 0; t < C; ++t) {
          const int8_t* xa = xb[t][b].qs + 64 * c + 4 * j;
          S[t] = _mm256_dpwssd_epi32(S[t], _mm256_maddubs_epi16(lo, bcast32(xa)), sp[2 * c]);
          S[t] = _mm256_dpwssd_epi32(S[t], _mm256_maddubs_epi16(hi, bcast32(xa + 32)), sp[2 * c + 1]);
        }
      }
      const __m256i mpair = _mm256_shuffle_epi8(mins[j / 4], pair_mask(j % 4));
#pragma GCC unroll 4
      for (int t = 0; t < C; ++t) {
        const __m256i M = _mm256_madd_epi16(mpair, bcast32(xb[t][b].bsums + 2 * j));
        acc[t][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[t]), dv[t], acc[t][j]);
        acc[t][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), dminv[t], acc[t][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < C; ++t) store_reduced8(acc[t], out + t * ldo);
}

template <int C>
void dot_group_tile_q6_K(const uint8_t* col, const BlockQ8_K* const* xb, int64_t K, float* out, int64_t ldo) {
  constexpr size_t kColumn = kX8GroupRows * sizeof(BlockQ6_K);
  constexpr size_t kScales = 16, kCodes = kScales + 128;  // codes: 96 bytes per (h, j)
  const __m256i same[2] = {int16_pair_mask(0, 0), int16_pair_mask(4, 4)};
  const __m256i both = int16_pair_mask(0, 4);
  __m256 acc[C][8];
#pragma GCC unroll 4
  for (int t = 0; t < C; ++t)
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[t][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < K / kQK_K; ++b, col += kColumn) {
    __m256 dv[C];
    scale_by_tokens<C>(col, xb, b, dv);
    auto scales = [&](int grp) {
      return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col + kScales + 16 * grp)));
    };
    // Half 0's sums wait in `half0` while half 1 is read: the column is read in storage order.
    __m256i half0[8][C];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int u = 0; u < 2; ++u) {
        __m256i sp[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) sp[i] = _mm256_shuffle_epi8(scales(4 * h + i), same[u]);
        for (int jj = 0; jj < 4; ++jj) {
          const int j = 4 * u + jj;
          __m256i S[C];
          if (h == 0) {
            const __m256i mpair = _mm256_shuffle_epi8(scales(j), both);
#pragma GCC unroll 4
            for (int t = 0; t < C; ++t)
              S[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                      _mm256_slli_epi32(_mm256_madd_epi16(mpair, bcast32(xb[t][b].bsums + 2 * j)), 5));
          } else {
#pragma GCC unroll 4
            for (int t = 0; t < C; ++t) S[t] = half0[j][t];
          }
          __m256i q[4];
          const uint8_t* qp = col + kCodes + 96 * (8 * h + j);
          q6_codes(load32(qp), load32(qp + 32), load32(qp + 64), q);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
            for (int t = 0; t < C; ++t)
              S[t] = _mm256_dpwssd_epi32(S[t], _mm256_maddubs_epi16(q[i], bcast32(xb[t][b].qs + 128 * h + 32 * i + 4 * j)),
                                         sp[i]);
#pragma GCC unroll 4
          for (int t = 0; t < C; ++t) {
            if (h == 0) half0[j][t] = S[t];
            else acc[t][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[t]), dv[t], acc[t][j]);
          }
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < C; ++t) store_reduced8(acc[t], out + t * ldo);
}

// Tokens per prefill tile of the x8 k-quant kernels.
constexpr int kX8TileTokens = 4;

template <GgmlType W>
void dot_groups(const uint8_t* w, size_t row_bytes, int64_t groups, const uint8_t* xq, size_t xq_stride,
                int64_t ntok, int64_t K, float* out, int64_t ldo) {
  // Every token passes over one group (8 rows x K: a few KiB, in L1) before the next group, the
  // k-quants 4 tokens at a time (dot_group_tile_*), the rest and q8_0 one token at a time.
  // Prefill (quant_bench --t 64, 2048 x 2048, one thread) against the one-row kernel's 4-token
  // tiles on plain rows: q4_K 3.8 vs 3.9 ms, q5_K 4.3-4.4 vs 4.4 (token by token it was 5.1: the
  // fifth-bit ops paid per token), q6_K 3.7 vs 3.8, q8_0 5.25 vs 6.8; unpacking each group back
  // to plain rows for the one-row tiles instead was 12-18% slower than plain.
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* wg = w + size_t(g) * kX8GroupRows * row_bytes;
    int64_t t = 0;
    if constexpr (W != GgmlType::kQ8_0) {
      for (; t + kX8TileTokens <= ntok; t += kX8TileTokens) {
        const BlockQ8_K* xb[kX8TileTokens];
        for (int c = 0; c < kX8TileTokens; ++c) xb[c] = reinterpret_cast<const BlockQ8_K*>(xq + size_t(t + c) * xq_stride);
        float* o = out + t * ldo + kX8GroupRows * g;
        if constexpr (W == GgmlType::kQ6_K) {
          dot_group_tile_q6_K<kX8TileTokens>(wg, xb, K, o, ldo);
        } else {
          dot_group_tile_k4<W, kX8TileTokens>(wg, xb, K, o, ldo);
        }
      }
    }
    for (; t < ntok; ++t) {
      float* o = out + t * ldo + kX8GroupRows * g;
      if constexpr (W == GgmlType::kQ8_0) {
        dot_group_one_q8_0(wg, reinterpret_cast<const BlockQ8_0*>(xq + size_t(t) * xq_stride), K, o);
      } else if constexpr (W == GgmlType::kQ6_K) {
        dot_group_one_q6_K(wg, reinterpret_cast<const BlockQ8_K*>(xq + size_t(t) * xq_stride), K, o);
      } else {
        dot_group_one<W>(wg, reinterpret_cast<const BlockQ8_K*>(xq + size_t(t) * xq_stride), K, o);
      }
    }
  }
}

}  // namespace

QuantDotGroupsFn quant_dot_groups_avx512(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ4_K: return dot_groups<GgmlType::kQ4_K>;
    case GgmlType::kQ5_K: return dot_groups<GgmlType::kQ5_K>;
    case GgmlType::kQ6_K: return dot_groups<GgmlType::kQ6_K>;
    case GgmlType::kQ8_0: return dot_groups<GgmlType::kQ8_0>;
    default: return nullptr;
  }
}

}  // namespace weft
