// The one-row quantized dot-product kernels, written once for the AVX2 and the AVX-512 VNNI paths:
// included by quant_matmul_avx2.cpp and quant_matmul_avx512.cpp, each with its own Isa (below),
// and the shared 256-bit pieces also by the x8 kernels (quant_matmul_x8_avx512.cpp).
// Internal linkage only (anonymous namespace): the copies are compiled with different flags, and
// an inline function with external linkage could be the AVX-512 copy the linker keeps for the
// AVX2 path.
//
// Structure (both paths): one weight row per pass, 8 int32 / float lanes, lane j = bytes
// 4j..4j+3 of a 32-byte group (the contract's lanes, quant_matmul.h), token tiles for prefill.
// The integer sums are exact whatever their order, so the float steps see the same integers on
// both paths and run in the contract's order, lane for lane: every output is the scalar twin's
// bits. What differs per path is in the Isa, and only for speed:
//   Isa::dot_u8s8(u, s)        int32 lanes of 4 products of unsigned by signed bytes
//                              (AVX2: vpmaddubsw + vpmaddwd with ones; VNNI: vpdpbusd from zero)
//   Isa::dot_i16(acc, a, b)    acc + the int16 pair products of a and b in int32 lanes
//                              (AVX2: vpmaddwd + vpaddd; VNNI: vpdpwssd, one instruction)
//   Isa::add_fifth_bit(q, bits, sel)  q + 16 where (bits & sel) != 0, per byte (q5_K)
//                              (AVX2: and, compare, and, or; AVX-512: vptestmb + masked vpaddb)
//   Isa::kAccs                 integer accumulators per token in the k-quant kernels. AVX-512: 4
//                              (one per chunk / group: vpdpwssd chains of 2, not 8; with one the
//                              VNNI kernel ran ~7% slower than the AVX2 one, with four ~7% faster,
//                              quant_bench from L2, 512 x 2048: q4_K 24.1 vs 22.5 GB/s, q5_K 24.4
//                              vs 17.0, q6_K 34.2 vs 31.2). AVX2: 1 (its vpaddd chain is 1 cycle a
//                              step, and 16 ymm registers do not hold 4 x 4 accumulators).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/quant_types.h"
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

// Decode (one token) streams each weight row (the x8 kernels: each group's column) once, start to
// end, and spends most of a block's cycles on arithmetic; the hardware prefetcher alone then keeps
// too few lines in flight. Each block of `bytes` prefetches the lines kPrefetchAhead further on
// (into the task's next rows at a row's end). A prefetch computes nothing: the same bits.
// One-row kernels, measured on an AVX2-only EPYC (Zen 3), quant_bench 4096 x 4096, weights from
// DRAM, four alternated rounds: q8_0 14.4-15.1 -> 19.9-21.0 GB/s on 1 thread, 25.1-28.1 ->
// 29.9-36.8 on 2; q4_0 +4% (1 KiB ahead read about as 2 KiB, 4 KiB less). The x8 forms: see
// quant_matmul_x8_avx512.cpp.
// The distance `ahead`: quant_prefetch_ahead() (quant_matmul.h), which the caller reads once
// before its loop. Not a function-local static in here: its guard is a possible call inside the
// loop, and since a call clobbers every vector register, GCC then kept the x8 q8_0 kernel's eight
// accumulators on the stack (a store and a reload per block and row lane; perf annotate).
inline void prefetch_ahead(const uint8_t* p, size_t bytes, size_t ahead) {
  if (ahead == 0) return;
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + ahead + o), _MM_HINT_T0);
}

// The 4 bytes at p in every int32 lane (an activation broadcast of the x8 kernels).
inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The contract's 8-lane reduction (matmul.h's order): s4_i = v_i + v_{i+4}, s2_i = s4_i + s4_{i+2},
// s2_0 + s2_1.
inline float reduce8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// The same reduction of eight rows at once (register j = lane j of eight rows): the eight
// outputs, row r in lane r, stored to out[0..8).
inline void store_reduced8(const __m256 acc[8], float* out) {
  const __m256 s4[4] = {_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[2], acc[6]),
                        _mm256_add_ps(acc[3], acc[7])};
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s4[0], s4[2]), _mm256_add_ps(s4[1], s4[3])));
}

// The 32 signed codes of a q8_0 / q4_0 block (q4_0: nibbles minus 8, element order kept).
template <GgmlType W>
inline __m256i q32_codes(const uint8_t* blk) {
  if constexpr (W == GgmlType::kQ8_0) {
    return load32(blk + 2);
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
  }
}

// The 6-bit scales and mins of a q4_K / q5_K super-block as two 8-byte words (byte s =
// sub-block s), unpack_scales_k4 four bytes at a time:
//   sc[0..3] = w0 & 0x3f..,  m[0..3] = w1 & 0x3f..,
//   sc[4..7] = (w2 & 0x0f..) | ((w0 >> 2) & 0x30..),  m[4..7] = ((w2 >> 4) & 0x0f..) | ((w1 >> 2) & 0x30..)
// (per byte, >> 2 moves bits 6-7 to 4-5 and >> 4 moves the high nibble down; the bits that cross
// from the neighbouring byte are masked off).
inline void unpack_scales_k4_words(const uint8_t s[12], uint64_t* sc, uint64_t* m) {
  uint32_t w[3];
  std::memcpy(w, s, 12);
  const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, b45 = 0x30303030u;
  *sc = uint64_t(w[0] & lo6) | uint64_t((w[2] & lo4) | ((w[0] >> 2) & b45)) << 32;
  *m = uint64_t(w[1] & lo6) | uint64_t(((w[2] >> 4) & lo4) | ((w[1] >> 2) & b45)) << 32;
}

// vpshufb mask (the same in both 128-bit lanes) that splats int16 element k of the lane.
inline __m256i splat16_mask(int k) { return _mm256_set1_epi16(short((2 * k) | (2 * k + 1) << 8)); }

// vpshufb mask for q6_K: the low 128-bit lane takes int16 element 2i, the high lane element 2i+1
// (the two 16-value sub-blocks of 32-value group i).
inline __m256i splat_pair_mask(int i) {
  const short lo = short((4 * i) | (4 * i + 1) << 8), hi = short((4 * i + 2) | (4 * i + 3) << 8);
  return _mm256_setr_epi16(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi);
}

// The unsigned 6-bit codes (0..63) of four 32-value groups of a q6_K half from its three 32-byte
// loads: ql0 (groups 0 and 2: low and high nibbles), ql1 (groups 1 and 3), qh (bit pairs 2i, 2i+1:
// group i). The x8 kernel passes the same bytes transposed (four positions of eight rows).
inline void q6_codes(__m256i ql0, __m256i ql1, __m256i qh, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
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
  // The activation blocks of tokens t0 .. t0 + C.
  template <typename B, int C>
  void tile_acts(int64_t t0, const B* (&xb)[C]) const {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) xb[c] = act<B>(t0 + c);
  }
  // Row r's outputs for tokens t0 .. t0 + C: each lane set reduced in the contract's order.
  template <int C>
  void store(int64_t r, int64_t t0, const __m256 (&acc)[C]) const {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) out[(t0 + c) * ldo + r] = reduce8(acc[c]);
  }
};

template <int C>
inline void zero(__m256 (&acc)[C]) {
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
}

// Token tiles: one weight row against C tokens at once, so each block's weights are loaded and
// unpacked once per tile (prefill); every output still gets exactly the operations of the C = 1
// (decode) path, in the same order; only independent chains are interleaved.
constexpr int kTileTokens = 4;

// Kernel<C>::run(row, t0, args) over the tokens in tiles of kTileTokens (the rest one token at a
// time) and, inside a tile, over every row: the task's rows (16 or more) stay in L1/L2 while a
// tile's activations (4 tokens) are reused by each of them.
template <template <int> class Kernel>
void for_rows_and_tiles(int64_t rows, int64_t ntok, const DotArgs& a) {
  int64_t t = 0;
  for (; t + kTileTokens <= ntok; t += kTileTokens)
    for (int64_t r = 0; r < rows; ++r) Kernel<kTileTokens>::run(r, t, a);
  for (; t < ntok; ++t)
    for (int64_t r = 0; r < rows; ++r) Kernel<1>::run(r, t, a);
}

// q8_0 / q4_0: per block, lane j = the exact integer I[b][j], then one fma per block. The sign of
// w moves onto x (|w| * sign(x, w): |w| <= 128 fits an unsigned byte, |x| <= 127, and the AVX2
// pair sums 2 * 128 * 127 < 32767 cannot saturate). One row per pass: streaming 4 rows together,
// sharing each activation load, was ~2x slower from DRAM (q8_0 11.7 vs 22.4 GB/s, q4_0 7.6 vs
// 11.4, 1 thread, 4096 x 4096): four 34-byte-stride streams cost more than the shared loads saved
// (the x8 layout gets the sharing from one stream instead).
template <class Isa, GgmlType W>
struct Q32 {
  static constexpr size_t kBlockBytes = W == GgmlType::kQ8_0 ? 34 : 18;
  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      const uint8_t* row = a.w + size_t(r) * a.row_bytes;
      const BlockQ8_0* xb[C];
      a.tile_acts(t0, xb);
      __m256 acc[C];
      zero(acc);
      const size_t ahead = C == 1 ? quant_prefetch_ahead() : 0;
      for (int64_t b = 0; b < a.K / kQK32; ++b) {
        const uint8_t* blk = row + size_t(b) * kBlockBytes;
        if constexpr (C == 1) prefetch_ahead(blk, kBlockBytes, ahead);
        const float dw = f16(load_u16(blk));
        const __m256i wv = q32_codes<W>(blk);
        const __m256i wabs = _mm256_sign_epi8(wv, wv);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i isum = Isa::dot_u8s8(wabs, _mm256_sign_epi8(load32(xb[c][b].qs), wv));
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * f16(xb[c][b].d)), acc[c]);
        }
      }
      a.store(r, t0, acc);
    }
  };
};

// The Isa::kAccs integer accumulators of each of C tokens, summed at the end (exact).
template <class Isa, int C>
struct SplitSums {
  __m256i s[Isa::kAccs][C];
  void init(int c, __m256i first) {
    s[0][c] = first;
#pragma GCC unroll 4
    for (int k = 1; k < Isa::kAccs; ++k) s[k][c] = _mm256_setzero_si256();
  }
  __m256i& at(int part, int c) { return s[part % Isa::kAccs][c]; }
  __m256i total(int c) const {
    if constexpr (Isa::kAccs == 4) {
      return _mm256_add_epi32(_mm256_add_epi32(s[0][c], s[1][c]), _mm256_add_epi32(s[2][c], s[3][c]));
    } else {
      static_assert(Isa::kAccs == 1, "1 or 4 accumulators");
      return s[0][c];
    }
  }
};

// q4_K / q5_K: chunk ch (64 values) is 32 bytes of nibbles, the low ones sub-block 2ch, the high
// ones 2ch+1 (q5_K adds 16 where bit s of qh[l] is set). Lane j of the integer sum collects, over
// the 8 sub-blocks s, sc[s] * (the products of bytes 4j..4j+3 of s): the contract's S_j
// (vpmaddubsw cannot saturate: 2 * 31 * 127 < 32767). The mins term m[j] * (bsums[2j] +
// bsums[2j+1]) is one vpmaddwd with each min repeated twice.
template <class Isa, GgmlType W>
struct K4 {
  using Block = std::conditional_t<W == GgmlType::kQ4_K, BlockQ4_K, BlockQ5_K>;
  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      const auto* wb = reinterpret_cast<const Block*>(a.w + size_t(r) * a.row_bytes);
      const BlockQ8_K* xb[C];
      a.tile_acts(t0, xb);
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      __m256 acc[C];
      zero(acc);
      const size_t ahead = C == 1 ? quant_prefetch_ahead() : 0;
      for (int64_t b = 0; b < a.K / kQK_K; ++b) {
        if constexpr (C == 1) prefetch_ahead(reinterpret_cast<const uint8_t*>(wb + b), sizeof(Block), ahead);
        uint64_t sc8, m8;
        unpack_scales_k4_words(wb[b].scales, &sc8, &m8);
        const __m256i scv = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(sc8))));
        const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(m8)));
        const __m256i mpairs = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
        __m256i hbits;
        if constexpr (W == GgmlType::kQ5_K) hbits = load32(wb[b].qh);
        SplitSums<Isa, C> isum;
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) isum.init(c, _mm256_setzero_si256());
#pragma GCC unroll 4
        for (int ch = 0; ch < 4; ++ch) {
          const __m256i q = load32(wb[b].qs + 32 * ch);
          __m256i lo = _mm256_and_si256(q, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          if constexpr (W == GgmlType::kQ5_K) {
            lo = Isa::add_fifth_bit(lo, hbits, _mm256_set1_epi8(char(1 << (2 * ch))));
            hi = Isa::add_fifth_bit(hi, hbits, _mm256_set1_epi8(char(1 << (2 * ch + 1))));
          }
          const __m256i s0 = _mm256_shuffle_epi8(scv, splat16_mask(2 * ch));
          const __m256i s1 = _mm256_shuffle_epi8(scv, splat16_mask(2 * ch + 1));
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            __m256i& s = isum.at(ch, c);
            s = Isa::dot_i16(s, _mm256_maddubs_epi16(lo, load32(xb[c][b].qs + 64 * ch)), s0);
            s = Isa::dot_i16(s, _mm256_maddubs_epi16(hi, load32(xb[c][b].qs + 64 * ch + 32)), s1);
          }
        }
        const float d = f16(wb[b].d), dmin = f16(wb[b].dmin);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i Mv = _mm256_madd_epi16(mpairs, load32(xb[c][b].bsums));  // lane j: m[j] * (bsums[2j] + bsums[2j+1])
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum.total(c)), _mm256_set1_ps(d * xb[c][b].d), acc[c]);
          acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(Mv), _mm256_set1_ps(dmin * xb[c][b].d), acc[c]);
        }
      }
      a.store(r, t0, acc);
    }
  };
};

// q6_K: per half h, four 32-value groups rebuilt from ql nibbles and qh bit pairs (q6_codes); the
// -32 offset enters lane j once per super-block through the activation sums:
// -32 * (sc[2j] * bsums[2j] + sc[2j+1] * bsums[2j+1]).
template <class Isa>
struct Q6K {
  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      const auto* wb = reinterpret_cast<const BlockQ6_K*>(a.w + size_t(r) * a.row_bytes);
      const BlockQ8_K* xb[C];
      a.tile_acts(t0, xb);
      __m256 acc[C];
      zero(acc);
      const size_t ahead = C == 1 ? quant_prefetch_ahead() : 0;
      for (int64_t b = 0; b < a.K / kQK_K; ++b) {
        if constexpr (C == 1) prefetch_ahead(reinterpret_cast<const uint8_t*>(wb + b), sizeof(BlockQ6_K), ahead);
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[b].scales));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        SplitSums<Isa, C> isum;
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c)
          isum.init(c, _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, load32(xb[c][b].bsums)), 5)));
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          // Scales of this half (sub-blocks 8h..8h+7) as int16, in both 128-bit lanes.
          const __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
          __m256i q[4];
          q6_codes(load32(wb[b].ql + 64 * h), load32(wb[b].ql + 64 * h + 32), load32(wb[b].qh + 32 * h), q);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const __m256i scv = _mm256_shuffle_epi8(sch, splat_pair_mask(i));
#pragma GCC unroll 4
            for (int c = 0; c < C; ++c) {
              __m256i& s = isum.at(i, c);
              s = Isa::dot_i16(s, _mm256_maddubs_epi16(q[i], load32(xb[c][b].qs + 128 * h + 32 * i)), scv);
            }
          }
        }
        const float d = f16(wb[b].d);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c)
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum.total(c)), _mm256_set1_ps(d * xb[c][b].d), acc[c]);
      }
      a.store(r, t0, acc);
    }
  };
};

// One QuantDotRowsFn per kernel family.
template <class Isa, template <int> class Kernel>
void dot_rows(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq, size_t xq_stride, int64_t ntok,
              int64_t K, float* out, int64_t ldo) {
  for_rows_and_tiles<Kernel>(rows, ntok, DotArgs{w, row_bytes, xq, xq_stride, K, out, ldo});
}

// The dispatch table of a path: nullptr for the plain types.
template <class Isa>
QuantDotRowsFn dot_rows_for(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ8_0: return dot_rows<Isa, Q32<Isa, GgmlType::kQ8_0>::template Tile>;
    case GgmlType::kQ4_0: return dot_rows<Isa, Q32<Isa, GgmlType::kQ4_0>::template Tile>;
    case GgmlType::kQ4_K: return dot_rows<Isa, K4<Isa, GgmlType::kQ4_K>::template Tile>;
    case GgmlType::kQ5_K: return dot_rows<Isa, K4<Isa, GgmlType::kQ5_K>::template Tile>;
    case GgmlType::kQ6_K: return dot_rows<Isa, Q6K<Isa>::template Tile>;
    default: return nullptr;
  }
}

}  // namespace
}  // namespace weft
