// AVX-512 VNNI integer dot products of GGML weight blocks with 8-bit activation blocks, in the
// exact order of quant_matmul.h (the scalar twins in quant_matmul.cpp define it), so every
// output is bit-identical to the scalar and AVX2 paths.
//
// What VNNI changes against the AVX2 kernels (same structure: one weight row per pass, 8 int32 /
// float lanes, lane j = bytes 4j..4j+3 of a 32-byte group, token tiles for prefill):
//   q8_0 / q4_0: vpdpbusd multiplies |w| by sign(x, w) and adds each 4 products into an int32
//     lane in one instruction (AVX2: vpmaddubsw into int16 pairs, then vpmaddwd with ones).
//   k-quants: vpmaddubsw (unsigned code x signed activation into int16 pairs; no saturation:
//     2 * 63 * 127 < 32767) then vpdpwssd with the sub-block scales, which multiplies the pairs,
//     adds them into int32 lanes and accumulates in one instruction (AVX2: vpmaddwd + vpaddd).
//   q5_K: the fifth bit is one vptestmb + a masked vpaddb (AVX2: and, compare, and, or).
// The integer sums are exact whatever their order, so the float steps see the AVX2 path's
// integers and run in the contract's order, lane for lane.
//
// Why 256-bit registers: the first version packed two rows into each 512-bit register (row r
// low, row r+1 high, activations broadcast), which halves the per-row fma chain. On the Zen 4
// this was built on it was no faster from L2 (Zen 4 executes a 512-bit op as two 256-bit
// halves, so the work per byte is the same) and 2-3x slower from DRAM (tools/quant_bench, one
// 4096 x 4096 matrix, 1 thread: q4_K 9.6 vs 21.7 GB/s, q8_0 9.1 vs 22.0), even with software
// prefetch of both rows: reading two rows at once interleaves two address streams, the pattern
// the AVX2 path had already measured as ~2x slower for 4 rows. One row per pass keeps one
// sequential stream per thread. A one-row 512-bit form (a chunk's nibbles broadcast to both
// halves and shifted by 0 | 4, meeting 64 contiguous activation bytes: half the instructions)
// was no faster from L2 and 5-10% slower from DRAM: the kernels are bound by vector-pipe work,
// which a double-pumped 512-bit op does not reduce (docs/formats-gguf.md, "The Q4_K_M decode
// step").

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

inline __m256i load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The contract's 8-lane reduction (matmul.h's order).
inline float reduce8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
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

// Token tiles, as in the AVX2 path: one weight row against C tokens at once, so each block's
// weights are loaded and unpacked once per tile (prefill); every output still gets exactly the
// operations of the C = 1 (decode) path, in the same order.
constexpr int kTileTokens = 4;

template <template <int> class Kernel>
void for_rows_and_tiles(int64_t rows, int64_t ntok, const DotArgs& a) {
  int64_t t = 0;
  for (; t + kTileTokens <= ntok; t += kTileTokens)
    for (int64_t r = 0; r < rows; ++r) Kernel<kTileTokens>::run(r, t, a);
  for (; t < ntok; ++t)
    for (int64_t r = 0; r < rows; ++r) Kernel<1>::run(r, t, a);
}

// q8_0 / q4_0: per block, lane j = the exact integer I[b][j], then one fma per block. The sign
// of w moves onto x (|w| * sign(x, w): |w| <= 128 fits an unsigned byte, |x| <= 127).
template <GgmlType W>
struct Q32 {
  static constexpr size_t kBlockBytes = W == GgmlType::kQ8_0 ? 34 : 18;

  // The 32 signed codes of a block (q4_0: nibbles minus 8, element order kept).
  static __m256i codes(const uint8_t* blk) {
    if constexpr (W == GgmlType::kQ8_0) {
      return load32(blk + 2);
    } else {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
      const __m128i m4 = _mm_set1_epi8(0x0F);
      const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
      return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
    }
  }

  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      const uint8_t* row = a.w + size_t(r) * a.row_bytes;
      const BlockQ8_0* xb[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) xb[c] = a.act<BlockQ8_0>(t0 + c);
      __m256 acc[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
      for (int64_t b = 0; b < a.K / kQK32; ++b) {
        const uint8_t* blk = row + size_t(b) * kBlockBytes;
        const float dw = f16(load_u16(blk));
        const __m256i wv = codes(blk);
        const __m256i wabs = _mm256_sign_epi8(wv, wv);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i xs = _mm256_sign_epi8(load32(xb[c][b].qs), wv);
          const __m256i isum = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, xs);
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * f16(xb[c][b].d)), acc[c]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) a.out[(t0 + c) * a.ldo + r] = reduce8(acc[c]);
    }
  };
};

template <GgmlType W>
void dot_rows_q32(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq, size_t xq_stride,
                  int64_t ntok, int64_t K, float* out, int64_t ldo) {
  for_rows_and_tiles<Q32<W>::template Tile>(rows, ntok, DotArgs{w, row_bytes, xq, xq_stride, K, out, ldo});
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

// vpshufb mask (the same in both 128-bit lanes) that splats int16 element k of the lane.
inline __m256i splat16_mask(int k) { return _mm256_set1_epi16(short((2 * k) | (2 * k + 1) << 8)); }

// q4_K / q5_K: chunk ch (64 values) is 32 bytes of nibbles, the low ones sub-block 2ch, the high
// ones 2ch+1 (q5_K adds 16 where bit s of qh[l] is set). Lane j of the integer sum collects, over
// the 8 sub-blocks s, sc[s] * (the products of bytes 4j..4j+3 of s): the contract's S_j. The
// mins term m[j] * (bsums[2j] + bsums[2j+1]) is one vpmaddwd with each min repeated twice.
template <GgmlType W>
struct K4 {
  using Block = std::conditional_t<W == GgmlType::kQ4_K, BlockQ4_K, BlockQ5_K>;
  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      const auto* wb = reinterpret_cast<const Block*>(a.w + size_t(r) * a.row_bytes);
      const BlockQ8_K* xb[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) xb[c] = a.act<BlockQ8_K>(t0 + c);
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      const __m256i b16 = _mm256_set1_epi8(0x10);
      __m256 acc[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
      for (int64_t b = 0; b < a.K / kQK_K; ++b) {
        uint64_t sc8, m8;
        unpack_scales_k4_words(wb[b].scales, &sc8, &m8);
        const __m256i scv = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(sc8))));
        const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(m8)));
        const __m256i mpairs = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
        __m256i hbits;
        if constexpr (W == GgmlType::kQ5_K) hbits = load32(wb[b].qh);
        // One integer accumulator per chunk: a vpdpwssd chain of 2 instead of 8. With one, the
        // kernel ran ~7% slower than the AVX2 one (whose vpmaddwd + vpaddd chain is 1 cycle per
        // step); with four it is ~7% faster (quant_bench from L2, one thread, 512 x 2048: q4_K
        // 24.1 vs 22.5 GB/s, q5_K 24.4 vs 17.0). Integer sums are exact, so the order is free.
        __m256i isum4[4][C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) isum4[0][c] = isum4[1][c] = isum4[2][c] = isum4[3][c] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int ch = 0; ch < 4; ++ch) {
          __m256i* isum = isum4[ch];
          const __m256i q = load32(wb[b].qs + 32 * ch);
          __m256i lo = _mm256_and_si256(q, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          if constexpr (W == GgmlType::kQ5_K) {
            lo = _mm256_mask_add_epi8(lo, _mm256_test_epi8_mask(hbits, _mm256_set1_epi8(char(1 << (2 * ch)))), lo, b16);
            hi = _mm256_mask_add_epi8(hi, _mm256_test_epi8_mask(hbits, _mm256_set1_epi8(char(1 << (2 * ch + 1)))), hi, b16);
          }
          const __m256i s0 = _mm256_shuffle_epi8(scv, splat16_mask(2 * ch));
          const __m256i s1 = _mm256_shuffle_epi8(scv, splat16_mask(2 * ch + 1));
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            isum[c] = _mm256_dpwssd_epi32(isum[c], _mm256_maddubs_epi16(lo, load32(xb[c][b].qs + 64 * ch)), s0);
            isum[c] = _mm256_dpwssd_epi32(isum[c], _mm256_maddubs_epi16(hi, load32(xb[c][b].qs + 64 * ch + 32)), s1);
          }
        }
        const float d = f16(wb[b].d), dmin = f16(wb[b].dmin);
        __m256i isum[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c)
          isum[c] = _mm256_add_epi32(_mm256_add_epi32(isum4[0][c], isum4[1][c]), _mm256_add_epi32(isum4[2][c], isum4[3][c]));
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i Mv = _mm256_madd_epi16(mpairs, load32(xb[c][b].bsums));  // lane j: m[j] * (bsums[2j] + bsums[2j+1])
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * xb[c][b].d), acc[c]);
          acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(Mv), _mm256_set1_ps(dmin * xb[c][b].d), acc[c]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) a.out[(t0 + c) * a.ldo + r] = reduce8(acc[c]);
    }
  };
};

template <GgmlType W>
void dot_rows_k4(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq, size_t xq_stride,
                 int64_t ntok, int64_t K, float* out, int64_t ldo) {
  for_rows_and_tiles<K4<W>::template Tile>(rows, ntok, DotArgs{w, row_bytes, xq, xq_stride, K, out, ldo});
}

// vpshufb masks for q6_K: the low 128-bit lane takes int16 element 2i, the high lane element
// 2i+1 (the two 16-value sub-blocks of 32-value group i).
inline __m256i splat_pair_mask(int i) {
  const short lo = short((4 * i) | (4 * i + 1) << 8), hi = short((4 * i + 2) | (4 * i + 3) << 8);
  return _mm256_setr_epi16(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi);
}

// q6_K: per half h, four 32-value groups rebuilt from ql nibbles and qh bit pairs (unsigned,
// 0..63); the -32 offset enters lane j once per super-block through the activation sums:
// -32 * (sc[2j] * bsums[2j] + sc[2j+1] * bsums[2j+1]).
struct Q6K {
  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      const auto* wb = reinterpret_cast<const BlockQ6_K*>(a.w + size_t(r) * a.row_bytes);
      const BlockQ8_K* xb[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) xb[c] = a.act<BlockQ8_K>(t0 + c);
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      const __m256i m30 = _mm256_set1_epi8(0x30);
      __m256 acc[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
      for (int64_t b = 0; b < a.K / kQK_K; ++b) {
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[b].scales));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        // Four integer accumulators (one per group of a half): vpdpwssd chains of 2 instead of 8
        // (q6_K from L2: 34.2 vs 31.2 GB/s); the sums are exact, so adding them at the end gives
        // the same S_j.
        __m256i isum4[4][C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          isum4[0][c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, load32(xb[c][b].bsums)), 5));
          isum4[1][c] = isum4[2][c] = isum4[3][c] = _mm256_setzero_si256();
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          // Scales of this half (sub-blocks 8h..8h+7) as int16, in both 128-bit lanes.
          const __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
          const __m256i ql0 = load32(wb[b].ql + 64 * h);
          const __m256i ql1 = load32(wb[b].ql + 64 * h + 32);
          const __m256i qh = load32(wb[b].qh + 32 * h);
          __m256i q[4];
          q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
          q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
          q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
          q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const __m256i scv = _mm256_shuffle_epi8(sch, splat_pair_mask(i));
#pragma GCC unroll 4
            for (int c = 0; c < C; ++c)
              isum4[i][c] = _mm256_dpwssd_epi32(isum4[i][c], _mm256_maddubs_epi16(q[i], load32(xb[c][b].qs + 128 * h + 32 * i)), scv);
          }
        }
        const float d = f16(wb[b].d);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i isum = _mm256_add_epi32(_mm256_add_epi32(isum4[0][c], isum4[1][c]), _mm256_add_epi32(isum4[2][c], isum4[3][c]));
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * xb[c][b].d), acc[c]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) a.out[(t0 + c) * a.ldo + r] = reduce8(acc[c]);
    }
  };
};

void dot_rows_q6_K(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq, size_t xq_stride,
                   int64_t ntok, int64_t K, float* out, int64_t ldo) {
  for_rows_and_tiles<Q6K::Tile>(rows, ntok, DotArgs{w, row_bytes, xq, xq_stride, K, out, ldo});
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
