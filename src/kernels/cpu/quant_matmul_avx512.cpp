// AVX-512 VNNI integer dot products of GGML weight blocks with 8-bit activation blocks, in the
// exact order of quant_matmul.h (the scalar twins in quant_matmul.cpp define it), so every
// output is bit-identical to the scalar and AVX2 paths.
//
// Layout: the contract keeps 8 float lanes per output (lane j = bytes 4j..4j+3 of a 32-byte
// group), so a 512-bit register holds TWO weight rows: the low 256 bits are row r, the high 256
// bits row r+1, and the activations (shared by both rows) are broadcast to both halves. Every
// float step (the per-block or per-super-block fma) then serves two rows at once, which halves
// the length of the per-row fma chain that bounds q8_0 / q4_0 (one fma per 32 values) and
// halves the instruction count of the k-quant unpacking. An odd last row goes to the AVX2
// kernel, which computes the same bits.
//
// Integer part:
//   q8_0 / q4_0: vpdpbusd multiplies unsigned by signed bytes and adds each 4 products into an
//     int32 lane, with no int16 saturation. AVX-512 has no vpsignb, so the signed weight codes
//     are made unsigned by an offset (q8_0: w ^ 0x80 = w + 128; q4_0: the raw nibble = w + 8)
//     and the offset comes back out exactly: the accumulator starts at -offset * (sum of the
//     lane's 4 activation codes), itself one vpdpbusd with a vector of ones, shared by the rows.
//   k-quants: vpmaddubsw (unsigned code x signed activation, pairs into int16; no saturation:
//     2 * 63 * 127 < 32767) then vpdpwssd with the sub-block scales (int16 pairs into int32,
//     fused with the accumulation that AVX2 needs a separate add for).
// The integer sums are exact whatever their order, so only their lane assignment matters; the
// float steps run in the contract's order, lane for lane.
#include <immintrin.h>

// GCC 12's AVX-512 headers build cast / broadcast / insert results from a deliberately
// uninitialised vector (_mm512_undefined_*), which -W(maybe-)uninitialized reports once inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft {

namespace {

inline float f16(uint16_t h) { return _cvtsh_ss(h); }  // exact, like f16_to_f32

inline uint16_t load_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The contract's 8-lane reduction (matmul.h's order), for the row in each half of a pair.
inline float reduce8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
inline void store_pair(__m512 acc, float* out0, float* out1) {
  *out0 = reduce8(_mm512_castps512_ps256(acc));
  *out1 = reduce8(_mm512_extractf32x8_ps(acc, 1));
}

// 32 bytes of row r (low half) and 32 bytes of row r+1 (high half).
inline __m512i load_pair(const uint8_t* p0, const uint8_t* p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)), 1);
}
// 32 bytes in both halves (activations, shared by the two rows).
inline __m512i broadcast32(const void* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// [a x 8 | b x 8]: a per-row float in each half.
inline __m512 pair_ps(float a, float b) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}

struct DotArgs {
  const uint8_t* w;
  size_t row_bytes;
  const uint8_t* xq;
  size_t xq_stride;
  int64_t K;
  float* out;
  int64_t ldo;
  template <typename B>
  const B* act(int64_t t) const { return reinterpret_cast<const B*>(xq + size_t(t) * xq_stride); }
};

// Token tiles, as in the AVX2 path: a pair of rows against C tokens at once, so each block's
// weights are loaded and unpacked once per tile (prefill); every output still gets exactly the
// operations of the C = 1 (decode) path, in the same order.
constexpr int kTileTokens = 4;

// Runs Kernel<C>::run(r, t0, args) for every pair of rows (r, r+1) and token tile, and the
// AVX2 kernel `single` for an odd last row.
template <template <int> class Kernel>
void for_pairs_and_tiles(int64_t rows, int64_t ntok, const DotArgs& a, QuantDotRowsFn single) {
  const int64_t even = rows & ~int64_t(1);
  int64_t t = 0;
  for (; t + kTileTokens <= ntok; t += kTileTokens)
    for (int64_t r = 0; r < even; r += 2) Kernel<kTileTokens>::run(r, t, a);
  for (; t < ntok; ++t)
    for (int64_t r = 0; r < even; r += 2) Kernel<1>::run(r, t, a);
  if (even < rows)
    single(a.w + size_t(even) * a.row_bytes, a.row_bytes, 1, a.xq, a.xq_stride, ntok, a.K, a.out + even, a.ldo);
}

// q8_0 / q4_0: per block, the exact integer I[b][j] of both rows in one register, then one fma
// for both rows. The unsigned codes u = w + offset; I = sum u*x - offset * sum x, the second
// term computed once per (token, block) and used as vpdpbusd's starting value.
template <GgmlType W>
struct Q32 {
  static constexpr size_t kBlockBytes = W == GgmlType::kQ8_0 ? 34 : 18;
  static constexpr int kOffsetShift = W == GgmlType::kQ8_0 ? 7 : 3;  // offset 128 or 8

  // The 32 unsigned codes of block `blk0` (row r) and `blk1` (row r+1), element order kept.
  static __m512i codes(const uint8_t* blk0, const uint8_t* blk1) {
    if constexpr (W == GgmlType::kQ8_0) {
      return _mm512_xor_si512(load_pair(blk0 + 2, blk1 + 2), _mm512_set1_epi8(char(0x80)));
    } else {
      // [r 16 B | r+1 16 B] -> 128-bit lanes [r, r, r+1, r+1]; the odd lanes take the high
      // nibbles (elements 16..31), the even lanes the low ones (elements 0..15).
      const __m256i raw = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk0 + 2))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk1 + 2)), 1);
      const __m512i dup = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(raw));
      const __m512i shift = _mm512_setr_epi64(0, 0, 0x0004000400040004, 0x0004000400040004, 0, 0,
                                              0x0004000400040004, 0x0004000400040004);
      return _mm512_and_si512(_mm512_srlv_epi16(dup, shift), _mm512_set1_epi8(0x0F));
    }
  }

  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      const uint8_t* row0 = a.w + size_t(r) * a.row_bytes;
      const uint8_t* row1 = row0 + a.row_bytes;
      const BlockQ8_0* xb[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) xb[c] = a.act<BlockQ8_0>(t0 + c);
      const __m512i ones = _mm512_set1_epi8(1);
      __m512 acc[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
      for (int64_t b = 0; b < a.K / kQK32; ++b) {
        const uint8_t* blk0 = row0 + size_t(b) * kBlockBytes;
        const uint8_t* blk1 = row1 + size_t(b) * kBlockBytes;
        const float dw0 = f16(load_u16(blk0)), dw1 = f16(load_u16(blk1));
        const __m512i u = codes(blk0, blk1);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m512i xv = broadcast32(xb[c][b].qs);
          // -offset * (sum of the lane's 4 activation codes): exact, |.| <= 128 * 508.
          const __m512i start = _mm512_sub_epi32(
              _mm512_setzero_si512(), _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xv), kOffsetShift));
          const __m512i isum = _mm512_dpbusd_epi32(start, u, xv);
          const float dx = f16(xb[c][b].d);
          acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), pair_ps(dw0 * dx, dw1 * dx), acc[c]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) store_pair(acc[c], &a.out[(t0 + c) * a.ldo + r], &a.out[(t0 + c) * a.ldo + r + 1]);
    }
  };
};

template <GgmlType W>
void dot_rows_q32(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq, size_t xq_stride,
                  int64_t ntok, int64_t K, float* out, int64_t ldo) {
  for_pairs_and_tiles<Q32<W>::template Tile>(rows, ntok, DotArgs{w, row_bytes, xq, xq_stride, K, out, ldo},
                                             quant_dot_rows_avx2(W));
}

// The 6-bit scales and mins of a q4_K / q5_K super-block as two 8-byte words (byte s =
// sub-block s): unpack_scales_k4 four bytes at a time (see the AVX2 path for the bit moves).
inline void unpack_scales_k4_words(const uint8_t s[12], uint64_t* sc, uint64_t* m) {
  uint32_t w[3];
  std::memcpy(w, s, 12);
  const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, b45 = 0x30303030u;
  *sc = uint64_t(w[0] & lo6) | uint64_t((w[2] & lo4) | ((w[0] >> 2) & b45)) << 32;
  *m = uint64_t(w[1] & lo6) | uint64_t(((w[2] >> 4) & lo4) | ((w[1] >> 2) & b45)) << 32;
}

// vpshufb masks (the same in every 128-bit lane) that splat int16 element k of the lane.
inline __m512i splat16_mask(int k) {
  return _mm512_set1_epi16(short((2 * k) | (2 * k + 1) << 8));
}

// q4_K / q5_K: chunk ch (64 values) of both rows: 32 bytes of nibbles per row, the low nibbles
// sub-block 2ch, the high ones 2ch+1 (q5_K adds 16 where bit s of qh[l] is set). Lane j of the
// integer sum collects, over the 8 sub-blocks s, sc[s] * (the products of bytes 4j..4j+3 of s):
// the contract's S_j. The mins term m[j] * (bsums[2j] + bsums[2j+1]) is one vpmaddwd.
template <GgmlType W>
struct K4 {
  using Block = std::conditional_t<W == GgmlType::kQ4_K, BlockQ4_K, BlockQ5_K>;
  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      const auto* wb0 = reinterpret_cast<const Block*>(a.w + size_t(r) * a.row_bytes);
      const auto* wb1 = reinterpret_cast<const Block*>(a.w + size_t(r + 1) * a.row_bytes);
      const BlockQ8_K* xb[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) xb[c] = a.act<BlockQ8_K>(t0 + c);
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      const __m512i b16 = _mm512_set1_epi8(0x10);
      __m512 acc[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
      for (int64_t b = 0; b < a.K / kQK_K; ++b) {
        uint64_t sc0, m0, sc1, m1;
        unpack_scales_k4_words(wb0[b].scales, &sc0, &m0);
        unpack_scales_k4_words(wb1[b].scales, &sc1, &m1);
        // Scales as int16: 128-bit lanes [r, r, r+1, r+1], each holding that row's 8 scales.
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_set_epi64x(int64_t(sc1), int64_t(sc0))));
        const __m512i scv = _mm512_shuffle_i64x2(sc16, sc16, _MM_SHUFFLE(1, 1, 0, 0));
        // Mins, each repeated twice: [r: m0 m0 m1 m1 .. m7 m7 | r+1: the same].
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_set_epi64x(int64_t(m1), int64_t(m0)));
        const __m512i mlh = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi16(m16, m16)),
                                               _mm256_unpackhi_epi16(m16, m16), 1);
        const __m512i mpairs = _mm512_shuffle_i64x2(mlh, mlh, _MM_SHUFFLE(3, 1, 2, 0));
        __m512i hbits;
        if constexpr (W == GgmlType::kQ5_K) hbits = load_pair(wb0[b].qh, wb1[b].qh);
        __m512i isum[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) isum[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int ch = 0; ch < 4; ++ch) {
          const __m512i q = load_pair(wb0[b].qs + 32 * ch, wb1[b].qs + 32 * ch);
          __m512i lo = _mm512_and_si512(q, m4);
          __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
          if constexpr (W == GgmlType::kQ5_K) {
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hbits, _mm512_set1_epi8(char(1 << (2 * ch)))), lo, b16);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(hbits, _mm512_set1_epi8(char(1 << (2 * ch + 1)))), hi, b16);
          }
          const __m512i s0 = _mm512_shuffle_epi8(scv, splat16_mask(2 * ch));
          const __m512i s1 = _mm512_shuffle_epi8(scv, splat16_mask(2 * ch + 1));
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            const __m512i x0 = broadcast32(xb[c][b].qs + 64 * ch);
            const __m512i x1 = broadcast32(xb[c][b].qs + 64 * ch + 32);
            isum[c] = _mm512_dpwssd_epi32(isum[c], _mm512_maddubs_epi16(lo, x0), s0);
            isum[c] = _mm512_dpwssd_epi32(isum[c], _mm512_maddubs_epi16(hi, x1), s1);
          }
        }
        const float d0 = f16(wb0[b].d), dmin0 = f16(wb0[b].dmin);
        const float d1 = f16(wb1[b].d), dmin1 = f16(wb1[b].dmin);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const float dx = xb[c][b].d;
          const __m512i Mv = _mm512_madd_epi16(mpairs, broadcast32(xb[c][b].bsums));
          acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), pair_ps(d0 * dx, d1 * dx), acc[c]);
          acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(Mv), pair_ps(dmin0 * dx, dmin1 * dx), acc[c]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) store_pair(acc[c], &a.out[(t0 + c) * a.ldo + r], &a.out[(t0 + c) * a.ldo + r + 1]);
    }
  };
};

template <GgmlType W>
void dot_rows_k4(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq, size_t xq_stride,
                 int64_t ntok, int64_t K, float* out, int64_t ldo) {
  for_pairs_and_tiles<K4<W>::template Tile>(rows, ntok, DotArgs{w, row_bytes, xq, xq_stride, K, out, ldo},
                                            quant_dot_rows_avx2(W));
}

// vpshufb masks for q6_K, the same in both 256-bit halves: the low 128-bit lane of a half takes
// int16 element 2i, the high lane element 2i+1 (the two 16-value sub-blocks of group i).
inline __m512i splat_pair_mask(int i) {
  const short lo = short((4 * i) | (4 * i + 1) << 8), hi = short((4 * i + 2) | (4 * i + 3) << 8);
  return _mm512_broadcast_i64x4(_mm256_setr_epi16(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi));
}

// q6_K: per half h, the four 32-value groups of both rows rebuilt from ql nibbles and qh bit
// pairs (unsigned, 0..63); the -32 offset enters lane j once per super-block through the
// activation sums: -32 * (sc[2j] * bsums[2j] + sc[2j+1] * bsums[2j+1]).
struct Q6K {
  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      const auto* wb0 = reinterpret_cast<const BlockQ6_K*>(a.w + size_t(r) * a.row_bytes);
      const auto* wb1 = reinterpret_cast<const BlockQ6_K*>(a.w + size_t(r + 1) * a.row_bytes);
      const BlockQ8_K* xb[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) xb[c] = a.act<BlockQ8_K>(t0 + c);
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      const __m512i m30 = _mm512_set1_epi8(0x30);
      __m512 acc[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
      for (int64_t b = 0; b < a.K / kQK_K; ++b) {
        // The 16 signed scales of each row as int16: 128-bit lanes [r 0..7, r 8..15, r+1 0..7, r+1 8..15].
        const __m256i sc8 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb0[b].scales))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb1[b].scales)), 1);
        const __m512i sc16 = _mm512_cvtepi8_epi16(sc8);
        __m512i isum[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m512i bs = broadcast32(xb[c][b].bsums);
          isum[c] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_madd_epi16(sc16, bs), 5));
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          // This half's scales (sub-blocks 8h..8h+7) in both 128-bit lanes of each row's half.
          const __m512i sch = h == 0 ? _mm512_shuffle_i64x2(sc16, sc16, _MM_SHUFFLE(2, 2, 0, 0))
                                     : _mm512_shuffle_i64x2(sc16, sc16, _MM_SHUFFLE(3, 3, 1, 1));
          const __m512i ql0 = load_pair(wb0[b].ql + 64 * h, wb1[b].ql + 64 * h);
          const __m512i ql1 = load_pair(wb0[b].ql + 64 * h + 32, wb1[b].ql + 64 * h + 32);
          const __m512i qh = load_pair(wb0[b].qh + 32 * h, wb1[b].qh + 32 * h);
          __m512i q[4];
          q[0] = _mm512_or_si512(_mm512_and_si512(ql0, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
          q[1] = _mm512_or_si512(_mm512_and_si512(ql1, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30));
          q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), m4), _mm512_and_si512(qh, m30));
          q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), m4),
                                 _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30));
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const __m512i scv = _mm512_shuffle_epi8(sch, splat_pair_mask(i));
#pragma GCC unroll 4
            for (int c = 0; c < C; ++c) {
              const __m512i xv = broadcast32(xb[c][b].qs + 128 * h + 32 * i);
              isum[c] = _mm512_dpwssd_epi32(isum[c], _mm512_maddubs_epi16(q[i], xv), scv);
            }
          }
        }
        const float d0 = f16(wb0[b].d), d1 = f16(wb1[b].d);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const float dx = xb[c][b].d;
          acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), pair_ps(d0 * dx, d1 * dx), acc[c]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) store_pair(acc[c], &a.out[(t0 + c) * a.ldo + r], &a.out[(t0 + c) * a.ldo + r + 1]);
    }
  };
};

void dot_rows_q6_K(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq, size_t xq_stride,
                   int64_t ntok, int64_t K, float* out, int64_t ldo) {
  for_pairs_and_tiles<Q6K::Tile>(rows, ntok, DotArgs{w, row_bytes, xq, xq_stride, K, out, ldo},
                                 quant_dot_rows_avx2(GgmlType::kQ6_K));
}

}  // namespace

QuantDotRowsFn quant_dot_rows_avx512(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ8_0: return dot_rows_q32<GgmlType::kQ8_0>;
    case GgmlType::kQ4_0: return dot_rows_q32<GgmlType::kQ4_0>;
    case GgmlType::kQ4_K: return dot_rows_k4<GgmlType::kQ4_K>;
    case GgmlType::kQ5_K: return dot_rows_k4<GgmlType::kQ5_K>;
    case GgmlType::kQ6_K: return dot_rows_q6_K;
    default: return nullptr;
  }
}

}  // namespace weft
