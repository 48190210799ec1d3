// AVX2/FMA/F16C primitives of the query-block-tiled f16 prefill attention (see
// attention_f16_prefill.h). Per (query row, key) score and per output element, the operation
// sequence is attention_f16_avx2.cpp's, so the results are bit-identical to it and to the
// scalar twins; only the sharing of loads across rows and keys differs.
//
// Only FMAs, adds of lane sums and the final score·scale happen here: the multiply-then-add
// formulas of the softmax merge stay in attention_f16_prefill.cpp, which is built without
// -mfma, so the compiler cannot contract them into FMAs (this file is built with -mfma, where
// GCC's default -ffp-contract=fast would).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_f16_prefill.h"
#include "kernels/cpu/expf_twin.h"

namespace weft {

namespace {

// lanes (0+4), (2+6), (1+5), (3+7): attention_f16's order.
inline float reduce_lanes(__m256 acc) {
  __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  __m128 s4 = _mm_add_ps(lo, hi);                    // [0+4, 1+5, 2+6, 3+7]
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // [(0+4)+(2+6), (1+5)+(3+7), ...]
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

void load_f16_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

// Scores of H query rows (stride hd) against C widened key rows (stride hd): H·C accumulators in
// registers, each K load shared by H rows and each q load by C keys.
template <int H, int C>
void score_tile(const float* q, const float* k, int64_t hd, float scale, float* s, int64_t s_stride) {
  const int64_t hd8 = hd & ~int64_t(7);
  __m256 acc[H][C];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[h][c] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd8; d += 8) {
    __m256 kv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) kv[c] = _mm256_loadu_ps(k + c * hd + d);
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      __m256 qv = _mm256_loadu_ps(q + h * hd + d);
      // Keep the q slice in a register for its C FMAs (GCC would otherwise fold a fresh load
      // into each FMA: H·C + C loads per step instead of H + C, and the loads bound the loop).
      __asm__("" : "+x"(qv));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[h][c] = _mm256_fmadd_ps(qv, kv[c], acc[h][c]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      float v = reduce_lanes(acc[h][c]);
      for (int64_t d = hd8; d < hd; ++d) v = std::fma(q[h * hd + d], k[c * hd + d], v);
      s[h * s_stride + c] = v * scale;
    }
}

// 4 rows × 3 keys: 12 accumulators + 3 K slices + 1 q slice = the 16 ymm registers; 7 loads
// per 12 FMAs.
constexpr int kScoreRows = 4, kScoreKeys = 3;

template <int H>
void score_tile_keys(int c, const float* q, const float* k, int64_t hd, float scale, float* s, int64_t s_stride) {
  switch (c) {
    case 1: score_tile<H, 1>(q, k, hd, scale, s, s_stride); break;
    case 2: score_tile<H, 2>(q, k, hd, scale, s, s_stride); break;
    default: score_tile<H, 3>(q, k, hd, scale, s, s_stride); break;
  }
}

void scores_avx2(const float* q, int64_t rows, const uint16_t* const* k_rows, int64_t n, int64_t hd, float scale,
                 float* kbuf, float* s, int64_t s_stride) {
  for (int64_t j0 = 0; j0 < n; j0 += kAttnPrefillKeyBlock) {
    const int64_t nj = std::min(kAttnPrefillKeyBlock, n - j0);
    // The next block's K rows come from L2/L3 while this block's tiles run.
    for (int64_t j = j0 + kAttnPrefillKeyBlock; j < std::min(n, j0 + 2 * kAttnPrefillKeyBlock); ++j)
      for (int64_t b = 0; b < hd * 2; b += 64) _mm_prefetch(reinterpret_cast<const char*>(k_rows[j]) + b, _MM_HINT_T0);
    for (int64_t j = 0; j < nj; ++j) load_f16_row(k_rows[j0 + j], kbuf + j * hd, hd);  // once per task
    for (int64_t r = 0; r < rows; r += kScoreRows) {
      const int hr = int(std::min<int64_t>(kScoreRows, rows - r));
      const float* qr = q + r * hd;
      for (int64_t j = 0; j < nj; j += kScoreKeys) {
        const int cj = int(std::min<int64_t>(kScoreKeys, nj - j));
        float* sr = s + r * s_stride + j0 + j;
        const float* kj = kbuf + j * hd;
        switch (hr) {
          case 1: score_tile_keys<1>(cj, qr, kj, hd, scale, sr, s_stride); break;
          case 2: score_tile_keys<2>(cj, qr, kj, hd, scale, sr, s_stride); break;
          case 3: score_tile_keys<3>(cj, qr, kj, hd, scale, sr, s_stride); break;
          default: score_tile_keys<4>(cj, qr, kj, hd, scale, sr, s_stride); break;
        }
      }
    }
  }
}

// H output rows × 8·V dims of acc in registers across all keys: each widened V slice (vb, W
// floats per key) is loaded once per tile for all H rows. Per element: acc = fma(p_j, v_j, acc)
// for j ascending from acc = 0, up to the row's own n_row (rows of a block's diagonal chunk
// stop at their causal end).
template <int H, int V>
void pv_tile(const float* vb, int64_t w, const int64_t* n_row, const float* p, int64_t p_stride, float* acc,
             int64_t hd) {
  int64_t n_lo = n_row[0], n_hi = n_row[0];
  for (int h = 1; h < H; ++h) {
    n_lo = std::min(n_lo, n_row[h]);
    n_hi = std::max(n_hi, n_row[h]);
  }
  __m256 a[H][V];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) a[h][v] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n_lo; ++j) {
    __m256 x[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) x[v] = _mm256_loadu_ps(vb + j * w + 8 * v);
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      const __m256 pj = _mm256_broadcast_ss(p + h * p_stride + j);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) a[h][v] = _mm256_fmadd_ps(pj, x[v], a[h][v]);
    }
  }
  for (int64_t j = n_lo; j < n_hi; ++j) {
    __m256 x[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) x[v] = _mm256_loadu_ps(vb + j * w + 8 * v);
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      if (j >= n_row[h]) continue;
      const __m256 pj = _mm256_broadcast_ss(p + h * p_stride + j);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) a[h][v] = _mm256_fmadd_ps(pj, x[v], a[h][v]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc + h * hd + 8 * v, a[h][v]);
}

constexpr int kPvRows = 6;

// Row tiles of near-equal height (32 rows: 6, 6, 5, 5, 5, 5 rather than 6 × 5 + 2).
template <int V>
void pv_rows(int64_t rows, const float* vb, const int64_t* n_row, const float* p, int64_t p_stride, float* acc,
             int64_t hd) {
  const int64_t n_tiles = (rows + kPvRows - 1) / kPvRows, base = rows / n_tiles, extra = rows % n_tiles;
  for (int64_t i = 0, r = 0; i < n_tiles; ++i) {
    const int64_t h = base + (i < extra ? 1 : 0);
    const float* pr = p + r * p_stride;
    float* ar = acc + r * hd;
    const int64_t* nr = n_row + r;
    r += h;
    switch (h) {
      case 1: pv_tile<1, V>(vb, 8 * V, nr, pr, p_stride, ar, hd); break;
      case 2: pv_tile<2, V>(vb, 8 * V, nr, pr, p_stride, ar, hd); break;
      case 3: pv_tile<3, V>(vb, 8 * V, nr, pr, p_stride, ar, hd); break;
      case 4: pv_tile<4, V>(vb, 8 * V, nr, pr, p_stride, ar, hd); break;
      case 5: pv_tile<5, V>(vb, 8 * V, nr, pr, p_stride, ar, hd); break;
      default: pv_tile<6, V>(vb, 8 * V, nr, pr, p_stride, ar, hd); break;
    }
  }
}

void accumulate_v_avx2(const uint16_t* const* v_rows, const int64_t* n_row, int64_t rows, const float* p,
                       int64_t p_stride, int64_t hd, float* vbuf, float* acc) {
  int64_t n_max = 0;
  for (int64_t r = 0; r < rows; ++r) n_max = std::max(n_max, n_row[r]);
  int64_t d = 0;
  // Slices of 16 dims: the keys' slice is widened once into vbuf ([n_max][16], in L1), then
  // serves every row tile.
  for (; d + 16 <= hd; d += 16) {
    for (int64_t j = 0; j < n_max; ++j) {
      const uint16_t* src = v_rows[j] + d;
      _mm256_storeu_ps(vbuf + j * 16, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
      _mm256_storeu_ps(vbuf + j * 16 + 8,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 8))));
    }
    pv_rows<2>(rows, vbuf, n_row, p, p_stride, acc + d, hd);
  }
  if (d + 8 <= hd) {
    for (int64_t j = 0; j < n_max; ++j)
      _mm256_storeu_ps(vbuf + j * 8,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v_rows[j] + d))));
    pv_rows<1>(rows, vbuf, n_row, p, p_stride, acc + d, hd);
    d += 8;
  }
  for (; d < hd; ++d) {  // rare head sizes: the last hd % 8 dims one by one
    for (int64_t j = 0; j < n_max; ++j) vbuf[j] = f16_to_f32(v_rows[j][d]);
    for (int64_t r = 0; r < rows; ++r) {
      float x = 0;
      for (int64_t j = 0; j < n_row[r]; ++j) x = std::fma(p[r * p_stride + j], vbuf[j], x);
      acc[r * hd + d] = x;
    }
  }
}

const AttnF16PrefillOps kAvx2Ops = {scores_avx2, accumulate_v_avx2, exp_sub_inplace};

}  // namespace

const AttnF16PrefillOps& attn_f16_prefill_ops_avx2() { return kAvx2Ops; }

}  // namespace weft
