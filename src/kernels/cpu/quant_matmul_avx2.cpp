// AVX2 integer dot products of GGML weight blocks with 8-bit activation blocks, in the exact
// order of quant_matmul.h (the scalar twins in quant_matmul.cpp define it).
//
// Integer part: _mm256_maddubs_epi16 multiplies unsigned by signed bytes and adds pairs into
// int16. q8_0 / q4_0 codes are signed, so the sign of w moves onto x (|w| * sign(x, w)); that
// cannot saturate since |w| <= 128 and |x| <= 127 (2 * 128 * 127 < 32767). k-quant codes are
// unsigned (<= 63) and go in directly. _mm256_madd_epi16 then adds int16 pairs into int32 lanes,
// with ones (q8_0 / q4_0: lane j = elements 4j..4j+3 of the block, the contract's I[b][j]) or
// with the sub-block scales (k-quants: lane j = elements 4j..4j+3 of each 32-value group, summed
// over the super-block, the contract's S_j). Every float step is lane-wise, so no horizontal sum
// is needed until the end of the row (an hsum per super-block cost ~30% of q4_K's time).
//
// Measured (tools/quant_bench, one 4096 x 4096 matrix per type, weights cycled over 128 MiB so
// they stream from DRAM, types interleaved round by round; this 2-core Zen 4 VM under load ~14
// from other builds, so 1 thread is the trustworthy column; best of 40 calls; llama.cpp = the
// ggml_vec_dot_* kernels of node-llama-cpp 3.21.1's prebuilt ggml, AVX2 build "haswell" and the
// AVX-512 build "zen4", fed the same quantized activations and threaded by the same row tasks):
//                GB/s of weights     x bf16 speed    llama.cpp haswell / zen4 GB/s
//   bf16 matmul       20.7               1.00
//   q8_0              22.0               2.40               14.7 / 14.8
//   q6_K              21.9               3.05               21.7 / 22.2
//   q5_K              17.1               2.95               16.6 / 16.9
//   q4_K              22.5               4.50               20.2 / 21.3
//   q4_0              11.6               2.41               10.4 / 10.5
// ("x bf16 speed" = bf16's median time / the type's median time for one matrix.)
// Command (D = /tmp/nlc/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64, after
// `cd /tmp/nlc && npm i -E node-llama-cpp@3.21.1`):
//   build/quant_bench --rounds 40 --threads 1,2 --ggml-cpu $D/libggml-cpu-haswell.so
//                     --ggml-cpu $D/libggml-cpu-zen4.so
// The 2-thread column of that run was dominated by the other processes (bf16 slower on 2
// threads than on 1) and is not quoted; rerun it on a quiet machine.

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft {

namespace {

inline float reduce8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

inline float f16(uint16_t h) { return _cvtsh_ss(h); }  // exact, like f16_to_f32

// The 32 signed codes of a q8_0 / q4_0 block (q4_0: nibbles minus 8, element order kept).
template <GgmlType W>
inline __m256i load_codes(const uint8_t* blk) {
  if constexpr (W == GgmlType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
  }
}

// Token tiles: one weight row against C tokens at once, so each block's codes and scales are
// loaded and unpacked once per tile instead of once per token (prefill). Every output still gets
// exactly the operations of the C = 1 (decode) path, in the same order; only independent chains
// are interleaved.
constexpr int kTileTokens = 4;

// Runs Kernel<C>::run(row, t0, ...) over the tokens in tiles of kTileTokens (the rest one token
// at a time) and, inside a tile, over every row: the task's rows (16 or more) stay in L1/L2
// while a tile's activations (4 tokens) are reused by each of them.
template <template <int> class Kernel, typename... Args>
void for_rows_and_tiles(int64_t rows, int64_t ntok, Args... args) {
  int64_t t = 0;
  for (; t + kTileTokens <= ntok; t += kTileTokens)
    for (int64_t r = 0; r < rows; ++r) Kernel<kTileTokens>::run(r, t, args...);
  for (; t < ntok; ++t)
    for (int64_t r = 0; r < rows; ++r) Kernel<1>::run(r, t, args...);
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

// q8_0 / q4_0: a single FMA chain of 8 lanes per (row, token). Measured on this machine (Zen 4,
// 1 thread, 4096 x 4096 decode from DRAM): streaming 4 rows together, sharing each activation
// load, was ~2x slower than one row per pass (q8_0 11.7 vs 22.4 GB/s, q4_0 7.6 vs 11.4): four
// 34-byte-stride streams and their address arithmetic cost more than the shared loads saved.
template <GgmlType W>
struct Q32 {
  template <int C>
  struct Tile {
    static void run(int64_t r, int64_t t0, const DotArgs& a) {
      constexpr size_t kBlockBytes = W == GgmlType::kQ8_0 ? 34 : 18;
      const uint8_t* row = a.w + size_t(r) * a.row_bytes;
      const BlockQ8_0* xb[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) xb[c] = a.act<BlockQ8_0>(t0 + c);
      const __m256i ones = _mm256_set1_epi16(1);
      __m256 acc[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
      for (int64_t b = 0; b < a.K / kQK32; ++b) {
        const uint8_t* blk = row + size_t(b) * kBlockBytes;
        uint16_t dw_bits;
        std::memcpy(&dw_bits, blk, 2);
        const float dw = f16(dw_bits);
        const __m256i wv = load_codes<W>(blk);
        const __m256i wabs = _mm256_sign_epi8(wv, wv);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[c][b].qs));
          const __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xv, wv)), ones);
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(dw * f16(xb[c][b].d)), acc[c]);
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

// The 6-bit scales and mins of a q4_K / q5_K super-block as two 8-byte words (byte s = sub-block
// s), unpacked with 32-bit word operations (the packing of unpack_scales_k4, four bytes at once):
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

// Byte-shuffle masks that splat int16 element k of a 128-bit lane over the whole lane.
alignas(32) constexpr uint8_t kSplat16[8][32] = {
#define WEFT_SPLAT(k) {2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1,  \
                       2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1,  \
                       2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1,  \
                       2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1}
    WEFT_SPLAT(0), WEFT_SPLAT(1), WEFT_SPLAT(2), WEFT_SPLAT(3),
    WEFT_SPLAT(4), WEFT_SPLAT(5), WEFT_SPLAT(6), WEFT_SPLAT(7),
#undef WEFT_SPLAT
};
inline __m256i splat16(__m256i v, int k) {
  return _mm256_shuffle_epi8(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(kSplat16[k])));
}

// q4_K / q5_K: per 64-value chunk c, 32 bytes of nibbles hold sub-blocks 2c (low) and 2c+1
// (high); q5_K ORs in 16 where bit s of qh[l] is set. The mins term of lane j,
// m[j] * (bsums[2j] + bsums[2j+1]), is one madd of the 16 activation sums with each min
// repeated twice.
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
        if constexpr (W == GgmlType::kQ5_K) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[b].qh));
        __m256i isum[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int ch = 0; ch < 4; ++ch) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[b].qs + 32 * ch));
          __m256i lo = _mm256_and_si256(q, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          if constexpr (W == GgmlType::kQ5_K) {
            const __m256i bl = _mm256_set1_epi8(char(1 << (2 * ch)));
            const __m256i bh = _mm256_set1_epi8(char(1 << (2 * ch + 1)));
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, bl), bl), b16));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, bh), bh), b16));
          }
          const __m256i s0 = splat16(scv, 2 * ch), s1 = splat16(scv, 2 * ch + 1);
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[c][b].qs + 64 * ch));
            const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[c][b].qs + 64 * ch + 32));
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), s0);
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), s1);
            isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(p0, p1));
          }
        }
        const float d = f16(wb[b].d), dmin = f16(wb[b].dmin);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[c][b].bsums));
          const __m256i Mv = _mm256_madd_epi16(mpairs, bsums);  // lane j: m[j] * (bsums[2j] + bsums[2j+1])
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

// Per-lane splat masks for q6_K: the low 128-bit lane takes int16 element 2i, the high lane
// element 2i+1 (the two 16-value sub-blocks of a 32-value group).
alignas(32) constexpr uint8_t kSplatPair[4][32] = {
#define WEFT_PAIR(i) {4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1,          \
                      4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1,          \
                      4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, \
                      4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3}
    WEFT_PAIR(0), WEFT_PAIR(1), WEFT_PAIR(2), WEFT_PAIR(3),
#undef WEFT_PAIR
};

// q6_K: per half, four 32-value groups whose codes are rebuilt from ql nibbles and qh bit pairs
// (unsigned, 0..63); the -32 offset enters each lane once per super-block through the activation
// sums: lane j starts at -32 * (sc[2j] * bsums[2j] + sc[2j+1] * bsums[2j+1]).
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
        __m256i isum[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[c][b].bsums));
          isum[c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums), 5));
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          // Scales of this half (sub-blocks 8h..8h+7) as int16, in both 128-bit lanes.
          const __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
          const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[b].ql + 64 * h));
          const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[b].ql + 64 * h + 32));
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[b].qh + 32 * h));
          __m256i q[4];
          q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
          q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
          q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
          q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const __m256i scv = _mm256_shuffle_epi8(sch, _mm256_load_si256(reinterpret_cast<const __m256i*>(kSplatPair[i])));
#pragma GCC unroll 4
            for (int c = 0; c < C; ++c) {
              const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[c][b].qs + 128 * h + 32 * i));
              isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q[i], xv), scv));
            }
          }
        }
        const float d = f16(wb[b].d);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c)
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * xb[c][b].d), acc[c]);
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

// Activation codes of 8 values: x * scale clamped to [-127, 127] (max/min take their second
// operand when the first is NaN: NaN -> -127, as code_half_even), rounded half to even.
inline __m256i codes8(__m256 x, __m256 scale) {
  __m256 v = _mm256_mul_ps(x, scale);
  v = _mm256_max_ps(v, _mm256_set1_ps(-127.0f));
  v = _mm256_min_ps(v, _mm256_set1_ps(127.0f));
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 32 int32 codes (4 vectors, element order) -> 32 int8 in element order.
inline void store_codes32(__m256i c0, __m256i c1, __m256i c2, __m256i c3, int8_t* dst) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// max |x| over n (multiple of 8) values; NaN never wins (the accumulator is max_ps's second operand).
inline float amax_of(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
  alignas(32) float l[8];
  _mm256_store_ps(l, m);
  float a = 0;
  for (float v : l) a = v > a ? v : a;
  return a;
}

void quantize_q8_0_avx2(const float* x, int64_t K, BlockQ8_0* y) {
  for (int64_t b = 0; b < K / 32; ++b, x += 32) {
    const float amax = amax_of(x, 32);
    y[b].d = f32_to_f16(amax / 127.0f);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    store_codes32(codes8(_mm256_loadu_ps(x), id), codes8(_mm256_loadu_ps(x + 8), id), codes8(_mm256_loadu_ps(x + 16), id),
                  codes8(_mm256_loadu_ps(x + 24), id), y[b].qs);
  }
}

void quantize_q8_K_avx2(const float* x, int64_t K, BlockQ8_K* y) {
  for (int64_t b = 0; b < K / kQK_K; ++b, x += kQK_K) {
    const float amax = amax_of(x, kQK_K);
    if (!(amax > 0) || amax > 3.4028235e38f) {  // zeros, or inf: all codes 0 (quantize_row_q8_K)
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    int first = 0;  // the first element of largest magnitude sets the sign of the scale
    while (std::fabs(x[first]) != amax) ++first;
    const float iscale = -127.0f / x[first];
    const __m256 s = _mm256_set1_ps(iscale);
    for (int g = 0; g < 8; ++g) {
      const float* xg = x + 32 * g;
      const __m256i c0 = codes8(_mm256_loadu_ps(xg), s), c1 = codes8(_mm256_loadu_ps(xg + 8), s);
      const __m256i c2 = codes8(_mm256_loadu_ps(xg + 16), s), c3 = codes8(_mm256_loadu_ps(xg + 24), s);
      store_codes32(c0, c1, c2, c3, y[b].qs + 32 * g);
      alignas(32) int32_t s01[8], s23[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(s01), _mm256_add_epi32(c0, c1));
      _mm256_store_si256(reinterpret_cast<__m256i*>(s23), _mm256_add_epi32(c2, c3));
      int a = 0, c = 0;
      for (int i = 0; i < 8; ++i) {
        a += s01[i];
        c += s23[i];
      }
      y[b].bsums[2 * g] = int16_t(a);
      y[b].bsums[2 * g + 1] = int16_t(c);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace

void quantize_activations_avx2(GgmlType wtype, const float* x, int64_t K, uint8_t* dst) {
  if (activation_type(wtype) == GgmlType::kQ8_K) {
    quantize_q8_K_avx2(x, K, reinterpret_cast<BlockQ8_K*>(dst));
  } else {
    quantize_q8_0_avx2(x, K, reinterpret_cast<BlockQ8_0*>(dst));
  }
}

QuantDotRowsFn quant_dot_rows_avx2(GgmlType wtype) {
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
