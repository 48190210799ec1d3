// AVX-512 primitives of the tiled strict f16 attention (attention_f16_prefill.h: prefill by
// query blocks, decode by (kv head, chunk) tasks). Per (query row, key) score and per output
// element the operation sequence is attention_f16_avx2.cpp's, so every bit equals the frozen
// kernel's; only the width of the registers and the sharing of loads differ.
//
// Scores keep the frozen dot's 8-lane order by putting two query rows in each zmm, never two
// chunks of one dot: lanes 0-7 hold row 2p's 8 partial sums and lanes 8-15 row 2p+1's, against
// the same 8 dims of a key broadcast into both halves. The row pairs are interleaved once per
// call (q2 below), so a 512-bit FMA does two rows' work and the halves are reduced in the frozen
// order, (0+4)+(2+6) + (1+5)+(3+7). The P·V sums are element-wise (acc = fma(p_j, v_j, acc),
// j ascending), so 16 dims per zmm change nothing but the count of instructions.
//
// Only FMAs, adds of lane sums and score·scale happen here (the softmax and merge formulas stay
// in attention_f16_prefill.cpp, built without -mfma: see that file).
//
// Cost per key at head_dim 256 and a GQA group of 8 (decode): 4 row pairs x 32 blocks = 128 zmm
// FMAs for the scores and 8 rows x 16 slices = 128 for P·V, against 256 + 256 ymm FMAs on AVX2;
// at 2 zmm FMAs per cycle that is ~130 cycles for 1 KiB of K and V (the AVX2 primitives measured
// ~450 cycles per key in L1 on the Xeon of this VM).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_f16_prefill.h"
#include "kernels/cpu/expf_twin.h"
#include "kernels/cpu/spread_prefetch.h"

namespace weft {

namespace {

// 16 f16 values to f32. (The zero-masked form with every lane set: the same instruction, without
// the undefined pass-through operand that makes GCC 12 warn -Wmaybe-uninitialized.)
inline __m512 widen16(const uint16_t* src) {
  return _mm512_maskz_cvtph_ps(__mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
}

// 8 f16 values to f32 in both 256-bit halves: 16 bytes loaded into both 128-bit halves, one
// vcvtph2ps (the values widen16 and a broadcast give).
inline __m512 widen8_twice(const uint16_t* src) {
  return _mm512_maskz_cvtph_ps(__mmask16(0xffff),
                               _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
}

using RowPrefetch = SpreadPrefetch<uint16_t>;  // f16 K / V rows (spread_prefetch.h says why)

void load_f16_row(const uint16_t* src, float* dst, int64_t n) {  // n % 16 == 0
  for (int64_t i = 0; i < n; i += 16)
    _mm512_storeu_ps(dst + i, widen16(src + i));
}

// Four accumulators, each two rows' 8 lane sums, to their eight dot products in the frozen
// order: s4 = lanes (0..3) + (4..7), s2 = (s4[0] + s4[2], s4[1] + s4[3]), s = s2[0] + s2[1]
// (IEEE addition is commutative, so operand order inside one add never changes a bit).
// out[0..7] = (a.lo, a.hi, b.lo, b.hi, c.lo, c.hi, d.lo, d.hi) · scale.
inline void reduce_four(__m512 a, __m512 b, __m512 c, __m512 d, float scale, float* out) {
  // 128-bit lanes: x = [x0 x1 | x2 x3] (row lo = x0 x1, row hi = x2 x3).
  const __m512 v1 = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),   // [a0 a2 b0 b2]
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));  // [a1 a3 b1 b3]
  const __m512 v2 = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
  // Per 128-bit lane k: v1 holds s4 of row k of (a.lo, a.hi, b.lo, b.hi), v2 of (c.lo ... d.hi).
  const __m512 s2 = _mm512_add_ps(_mm512_shuffle_ps(v1, v2, _MM_SHUFFLE(1, 0, 1, 0)),   // [v1 0 1, v2 0 1]
                                  _mm512_shuffle_ps(v1, v2, _MM_SHUFFLE(3, 2, 3, 2)));  // [v1 2 3, v2 2 3]
  const __m512 s1 = _mm512_add_ps(_mm512_shuffle_ps(s2, s2, _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_ps(s2, s2, _MM_SHUFFLE(3, 1, 3, 1)));
  alignas(64) float t[16];
  _mm512_store_ps(t, _mm512_mul_ps(s1, _mm512_set1_ps(scale)));
  out[0] = t[0], out[1] = t[4], out[2] = t[8], out[3] = t[12];
  out[4] = t[1], out[5] = t[5], out[6] = t[9], out[7] = t[13];
}

// Scores of P row pairs (q2: interleaved, 16 floats per 8-dim block) against C keys: P·C zmm
// accumulators, each key block in both halves of a register and shared by the P pairs, each q
// pair load shared by the C keys. `rows` (1..2P) says which rows exist. The keys come either
// widened in kbuf (`k`, stride hd: prefill, where several row tiles share them) or straight from
// their f16 rows (kFromRows: decode, one row tile, so a widened copy would be stored and read
// back once). From the rows, 8 dims of a key are widened into both halves (widen8_twice): the
// values widen16 and a broadcast give, so the same bits. The decode
// form prefetches the rows `ahead` (this tile's keys one key block on, kAttnPrefillKeyBlock), a
// line of each per 32 dims; the prefill form spreads its block's prefetches with `pf`.
template <int P, int C, bool kFromRows>
void score_tile(const float* q2, const float* k, const uint16_t* const* k_rows, const uint16_t* const* ahead,
                int64_t hd, float scale, int64_t rows, float* s, int64_t s_stride, RowPrefetch& pf) {
  __m512 acc[P][C];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[p][c] = _mm512_setzero_ps();
  const uint16_t* kr[C];
  const uint16_t* kn[C];
  if constexpr (kFromRows) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) kr[c] = k_rows[c], kn[c] = ahead[c];
  }
  for (int64_t d = 0; d < hd; d += 8) {
    if constexpr (kFromRows) {
      if (d % 32 == 0) {
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) __builtin_prefetch(kn[c] + d, 0, 2);
      }
    } else {
      pf.step(2);
    }
    __m512 kv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      if constexpr (kFromRows)
        kv[c] = widen8_twice(kr[c] + d);
      else
        kv[c] = _mm512_broadcast_f32x8(_mm256_loadu_ps(k + c * hd + d));
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      __m512 qv = _mm512_loadu_ps(q2 + p * 2 * hd + 2 * d);
      __asm__("" : "+v"(qv));  // one load per pair, kept in a register for its C FMAs
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[p][c] = _mm512_fmadd_ps(qv, kv[c], acc[p][c]);
    }
  }
  // Reduce in fours (padding with zeros), then store the rows that exist.
  constexpr int kN = P * C, kN4 = (kN + 3) / 4 * 4;
  __m512 flat[kN4];
#pragma GCC unroll 8
  for (int i = 0; i < kN4; ++i) flat[i] = i < kN ? acc[i / C][i % C] : _mm512_setzero_ps();
  float r[kN4 * 2];
#pragma GCC unroll 8
  for (int i = 0; i < kN4; i += 4) reduce_four(flat[i], flat[i + 1], flat[i + 2], flat[i + 3], scale, r + 2 * i);
#pragma GCC unroll 8
  for (int i = 0; i < kN; ++i) {
    const int p = i / C, c = i % C;
    s[(2 * p) * s_stride + c] = r[2 * i];
    if (2 * p + 1 < rows) s[(2 * p + 1) * s_stride + c] = r[2 * i + 1];
  }
}

// 4 pairs (8 rows) x 6 keys: 24 accumulators + 6 key blocks + 1 q pair of the 32 zmm registers;
// 10 loads per 24 FMAs.
constexpr int kScorePairs = 4, kScoreKeys = 6;

template <int P, bool kFromRows>
void score_tile_keys(int c, const float* q2, const float* k, const uint16_t* const* k_rows,
                     const uint16_t* const* ahead, int64_t hd, float scale, int64_t rows, float* s, int64_t s_stride,
                     RowPrefetch& pf) {
  switch (c) {
#define WEFT_SCORE_CASE(C) \
  case C: score_tile<P, C, kFromRows>(q2, k, k_rows, ahead, hd, scale, rows, s, s_stride, pf); break;
    WEFT_SCORE_CASE(1) WEFT_SCORE_CASE(2) WEFT_SCORE_CASE(3) WEFT_SCORE_CASE(4) WEFT_SCORE_CASE(5)
#undef WEFT_SCORE_CASE
    default: score_tile<P, 6, kFromRows>(q2, k, k_rows, ahead, hd, scale, rows, s, s_stride, pf); break;
  }
}

template <bool kFromRows>
void score_tile_pairs(int hp, int cj, const float* q2, const float* k, const uint16_t* const* k_rows,
                      const uint16_t* const* ahead, int64_t hd, float scale, int64_t rows, float* s,
                      int64_t s_stride, RowPrefetch& pf) {
  switch (hp) {
    case 1: score_tile_keys<1, kFromRows>(cj, q2, k, k_rows, ahead, hd, scale, rows, s, s_stride, pf); break;
    case 2: score_tile_keys<2, kFromRows>(cj, q2, k, k_rows, ahead, hd, scale, rows, s, s_stride, pf); break;
    case 3: score_tile_keys<3, kFromRows>(cj, q2, k, k_rows, ahead, hd, scale, rows, s, s_stride, pf); break;
    default: score_tile_keys<4, kFromRows>(cj, q2, k, k_rows, ahead, hd, scale, rows, s, s_stride, pf); break;
  }
}

static_assert(kAttnPrefillKeyBlock % kScoreKeys == 0, "key blocks are whole score tiles");

void scores_avx512(const float* q, int64_t rows, const uint16_t* const* k_rows, int64_t n, int64_t hd, float scale,
                   float* kbuf, float* s, int64_t s_stride) {
  if (hd % 16 != 0) {  // rare head sizes: the AVX2 primitives (same bits)
    attn_f16_prefill_ops_avx2().scores(q, rows, k_rows, n, hd, scale, kbuf, s, s_stride);
    return;
  }
  // Row pairs interleaved by 8-dim blocks: q2[pair][block] = [row 2p, dims 8b..8b+7 | row 2p+1,
  // the same dims] (zeros for a missing last row; its lanes are computed and dropped).
  const int64_t pairs = (rows + 1) / 2;
  thread_local std::vector<float> q2_buffer;
  if (q2_buffer.size() < size_t(pairs * 2 * hd)) q2_buffer.resize(size_t(pairs * 2 * hd));
  float* const q2 = q2_buffer.data();
  for (int64_t p = 0; p < pairs; ++p)
    for (int64_t d = 0; d < hd; d += 8) {
      const __m256 lo = _mm256_loadu_ps(q + 2 * p * hd + d);
      const __m256 hi = 2 * p + 1 < rows ? _mm256_loadu_ps(q + (2 * p + 1) * hd + d) : _mm256_setzero_ps();
      _mm512_storeu_ps(q2 + p * 2 * hd + 2 * d, _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
    }
  RowPrefetch none;
  if (pairs <= kScorePairs) {
    // One row tile (decode: a GQA group of up to 8 rows): each key serves one tile, so the keys
    // are read straight from their f16 rows. Measured against the widened copy in isolation
    // (this VM's Zen 5, 1 thread, head_dim 256, 8 rows): 46-51 -> 36-42 ns per key.
    for (int64_t j = 0; j < n; j += kScoreKeys) {
      const int cj = int(std::min<int64_t>(kScoreKeys, n - j));
      const uint16_t* ahead[kScoreKeys];
      for (int c = 0; c < cj; ++c) {
        const int64_t t = j + c + kAttnPrefillKeyBlock;
        ahead[c] = t < n ? k_rows[t] : k_rows[j + c];  // past the keys: its own row, in cache
      }
      score_tile_pairs<true>(int(pairs), cj, q2, nullptr, k_rows + j, ahead, hd, scale, rows, s + j, s_stride, none);
    }
    return;
  }
  for (int64_t j0 = 0; j0 < n; j0 += kAttnPrefillKeyBlock) {
    const int64_t nj = std::min(kAttnPrefillKeyBlock, n - j0);
    // The next block's K rows come from memory while the first row pair's tiles run.
    RowPrefetch pf(k_rows + j0 + nj, std::min(kAttnPrefillKeyBlock, n - j0 - nj), hd * 2);
    for (int64_t j = 0; j < nj; ++j) load_f16_row(k_rows[j0 + j], kbuf + j * hd, hd);  // once per task
    for (int64_t p = 0; p < pairs; p += kScorePairs) {
      const int hp = int(std::min<int64_t>(kScorePairs, pairs - p));
      const int64_t r = 2 * p, rows_here = std::min<int64_t>(2 * kScorePairs, rows - r);
      const float* qp = q2 + p * 2 * hd;
      for (int64_t j = 0; j < nj; j += kScoreKeys) {
        const int cj = int(std::min<int64_t>(kScoreKeys, nj - j));
        score_tile_pairs<false>(hp, cj, qp, kbuf + j * hd, nullptr, nullptr, hd, scale, rows_here,
                                s + r * s_stride + j0 + j, s_stride, p == 0 ? pf : none);
      }
    }
  }
}

// H output rows x 16·V dims of acc in registers over keys [j0, j1): each V slice is loaded once
// per tile for all H rows. The slices come either widened in vbuf (W floats per key: prefill,
// where many row tiles share them) or straight from the f16 rows at dim offset `d` (decode: one
// row tile, so widening into a buffer first would only add a store and a load). Per element:
// acc = fma(p_j, v_j, acc) for j ascending up to the row's own n_row, starting from 0 (j0 == 0)
// or from the value the previous key block stored (an f32 round trip changes no bit). The decode
// form prefetches, per key, the line at `d` of the row ahead[j - j0].
template <int H, int V, bool kFromRows>
void pv_tile(const float* vb, int64_t w, const uint16_t* const* v_rows, const uint16_t* const* ahead, int64_t d,
             const int64_t* n_row, int64_t j0, int64_t j1, const float* p, int64_t p_stride, float* acc, int64_t hd) {
  // Key indices are below kAttnChunk: int keeps GCC from reasoning about pointer overflow at
  // 2^58 iterations (-Waggressive-loop-optimizations) in the vbuf form.
  int n_lo = int(std::min(j1, n_row[0])), n_hi = n_lo;
  for (int h = 1; h < H; ++h) {
    n_lo = std::min(n_lo, int(std::min(j1, n_row[h])));
    n_hi = std::max(n_hi, int(std::min(j1, n_row[h])));
  }
  __m512 a[H][V];
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) a[h][v] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + h * hd + 16 * v);
  auto slice = [&](int j, int v) {
    if constexpr (kFromRows)
      return widen16(v_rows[j] + d + 16 * v);
    else
      return _mm512_loadu_ps(vb + j * w + 16 * v);
  };
  for (int j = int(j0); j < n_lo; ++j) {
    if constexpr (kFromRows) __builtin_prefetch(ahead[j - j0] + d, 0, 2);
    __m512 x[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) x[v] = slice(j, v);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m512 pj = _mm512_set1_ps(p[h * p_stride + j]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) a[h][v] = _mm512_fmadd_ps(pj, x[v], a[h][v]);
    }
  }
  for (int j = std::max(int(j0), n_lo); j < n_hi; ++j) {
    __m512 x[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) x[v] = slice(j, v);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      if (j >= n_row[h]) continue;
      const __m512 pj = _mm512_set1_ps(p[h * p_stride + j]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) a[h][v] = _mm512_fmadd_ps(pj, x[v], a[h][v]);
    }
  }
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(acc + h * hd + 16 * v, a[h][v]);
}

template <int V, bool kFromRows>
void pv_tile_rows(int h, const float* vb, int64_t w, const uint16_t* const* v_rows, const uint16_t* const* ahead,
                  int64_t d, const int64_t* n_row, int64_t j0, int64_t j1, const float* p, int64_t p_stride, float* acc,
                  int64_t hd) {
  switch (h) {
#define WEFT_PV_CASE(H) \
  case H: pv_tile<H, V, kFromRows>(vb, w, v_rows, ahead, d, n_row, j0, j1, p, p_stride, acc, hd); break;
    WEFT_PV_CASE(1) WEFT_PV_CASE(2) WEFT_PV_CASE(3) WEFT_PV_CASE(4)
    WEFT_PV_CASE(5) WEFT_PV_CASE(6) WEFT_PV_CASE(7)
#undef WEFT_PV_CASE
    default: pv_tile<8, V, kFromRows>(vb, w, v_rows, ahead, d, n_row, j0, j1, p, p_stride, acc, hd); break;
  }
}

// Rows per P·V tile: 8 rows x 2 zmm (32 dims) from the f16 rows = 16 accumulators; from vbuf,
// 8 rows x 1 zmm (its slices are 16 dims, to fit vbuf's kAttnChunk · 16 floats).
constexpr int kPvRows = 8;
// Keys per block of the decode form: 32 V rows (16 KiB at head_dim 256) stay in L1 while the
// tile walks their dims 32 at a time; the next block's rows are prefetched meanwhile.
constexpr int64_t kPvKeyBlock = 32;

void accumulate_v_avx512(const uint16_t* const* v_rows, const int64_t* n_row, int64_t rows, const float* p,
                         int64_t p_stride, int64_t hd, float* vbuf, float* acc) {
  if (hd % 16 != 0) {  // rare head sizes: the AVX2 primitives (same bits)
    attn_f16_prefill_ops_avx2().accumulate_v(v_rows, n_row, rows, p, p_stride, hd, vbuf, acc);
    return;
  }
  int64_t n_max = 0;
  for (int64_t r = 0; r < rows; ++r) n_max = std::max(n_max, n_row[r]);
  if (rows <= kPvRows) {
    // One row tile (decode: the GQA group of one token): widen in registers, 32 dims a pass,
    // key block by key block.
    const int h = int(rows);
    for (int64_t j0 = 0; j0 < n_max; j0 += kPvKeyBlock) {
      const int64_t j1 = std::min(n_max, j0 + kPvKeyBlock);
      // The next block's rows, one line per key of this block's passes (32 keys x 8 passes at
      // head_dim 256 = its 256 lines): key j's pass at dim d fetches line d of row j + 32 (past
      // the keys: its own row, in cache). Addresses from this table, not a cursor carried from
      // key to key: measured in isolation (1 thread, 256K keys) 42-46 -> 37-43 ns per key.
      const uint16_t* ahead[kPvKeyBlock];
      for (int64_t j = j0; j < j1; ++j) ahead[j - j0] = j + kPvKeyBlock < n_max ? v_rows[j + kPvKeyBlock] : v_rows[j];
      int64_t d = 0;
      for (; d + 32 <= hd; d += 32)
        pv_tile_rows<2, true>(h, nullptr, 0, v_rows, ahead, d, n_row, j0, j1, p, p_stride, acc + d, hd);
      if (d < hd) pv_tile_rows<1, true>(h, nullptr, 0, v_rows, ahead, d, n_row, j0, j1, p, p_stride, acc + d, hd);
    }
    return;
  }
  const int64_t n_tiles = (rows + kPvRows - 1) / kPvRows, base = rows / n_tiles, extra = rows % n_tiles;
  // Slices of 16 dims: the keys' slice is widened once into vbuf ([n_max][16], in L1), then
  // serves every row tile (near-equal heights: 20 rows -> 7, 7, 6).
  for (int64_t d = 0; d < hd; d += 16) {
    for (int64_t j = 0; j < n_max; ++j)
      _mm512_storeu_ps(vbuf + j * 16, widen16(v_rows[j] + d));
    for (int64_t i = 0, r = 0; i < n_tiles; ++i) {
      const int64_t h = base + (i < extra ? 1 : 0);
      pv_tile_rows<1, false>(int(h), vbuf, 16, nullptr, nullptr, 0, n_row + r, 0, n_max, p + r * p_stride, p_stride,
                             acc + r * hd + d, hd);
      r += h;
    }
  }
}

const AttnF16PrefillOps kAvx512Ops = {scores_avx512, accumulate_v_avx512, exp_sub_inplace};

}  // namespace

const AttnF16PrefillOps& attn_f16_prefill_ops_avx512() { return kAvx512Ops; }

}  // namespace weft
