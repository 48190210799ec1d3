// AVX-512 matrix products, bit-identical to matmul_scalar and matmul_avx2 (order in matmul.h).
//
// One zmm register holds the 8 lanes of TWO dot products: its low 256 bits are the 8 lanes of
// weight row n and its high 256 bits those of row n+1, both against the same token, whose 8
// x values are broadcast to both halves. Every lane therefore still sees exactly the fma
// sequence of the contract (one accumulator per lane, increasing k, +0-padded tail chunk), and
// each half is reduced by the same fixed tree as reduce8. A K chunk is never split across lanes:
// that would change the order, so the 512-bit width is spent on pairs of outputs instead.
//
//   decode (T = 1): 8 rows
//     = 4 zmm accumulators per pass; the two rows' 8 weights are widened side by side: f16 by
//     two 256-bit converts (one 512-bit convert measured 0.87-0.96x of AVX2 decode on Zen4, the
//     pair ~1.0x), bf16 by one zero-masked word permute (zero-extend + shift: 0.91-0.98x of
//     AVX2; the permute 1.06x);
//   a few tokens (2 <= T <= kMatmulStreamingTokensAvx512, 8 at a time): the same pair loads,
//     each widened once per chunk and used for every token of the pass (pairs x tokens
//     accumulators), so the weights stream once and the shuffles are paid once per 2..8 FMAs;
//   prefill: each task's rows are widened once into per-thread scratch laid out by row pair
//     ([row n chunk c | row n+1 chunk c], 16 floats), so the tile loads one zmm per pair and
//     one 256-bit broadcast per token. The tile is 4 pairs (8 rows) x 6 tokens: 24 accumulators
//     + 4 weight registers + 1 x register of the 32 zmm; each x load feeds 8 rows (AVX2: 4).
//     Tokens are taken in blocks of kTokenBlock so a block's x rows stay in L2 while every row
//     pair of the task sweeps them. A task holds up to 64 rows (matmul_avx512_prefill_rows), so
//     each x row it pulls from L3 feeds 64 weight rows (16 before: a 16-core prefill then read
//     ~50 GB/s of x from L3); the widened rows and accumulators sit 64-byte aligned.
//   K % 8 tails use masked loads, which never fault on the masked-out lanes, so no byte past a
//   row (possibly the end of a memory-mapped file) or past the last x row is read.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics (broadcast_f32x8, cvtph_ps, ...) start from _mm512_undefined_ps(),
// a self-initialised variable that -W(maybe-)uninitialized reports at every inlined use (GCC bug
// 105593, fixed in GCC 13). The values are fully defined; only the warning is silenced.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cstdint>
#include <vector>

#include "core/aligned_vector.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace weft {

namespace {

// The reduction of matmul.h, s4[i] = v[i] + v[i+4], s2[i] = s4[i] + s4[i+2], s2[0] + s2[1], done
// on both 256-bit halves at once (the same adds, operands in the same order as reduce8 in
// matmul_avx2.cpp): *lo gets the low half's dot product, *hi the high half's.
inline void reduce_pair(__m512 v, float* lo, float* hi) {
  const __m512 s4 = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512 s2 = _mm512_add_ps(s4, _mm512_permute_ps(s4, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 s1 = _mm512_add_ps(s2, _mm512_permute_ps(s2, _MM_SHUFFLE(2, 3, 0, 1)));
  *lo = _mm512_cvtss_f32(s1);
  *hi = _mm_cvtss_f32(_mm512_extractf32x4_ps(s1, 2));
}

// Lanes j < rem set (rem in 1..7).
inline __mmask8 tail_mask(int64_t rem) { return __mmask8((1u << rem) - 1u); }

// Eight x values broadcast to both halves; the masked form zero-fills lanes >= rem.
inline __m512 load_x(const float* x) { return _mm512_broadcast_f32x8(_mm256_loadu_ps(x)); }
inline __m512 load_x_tail(const float* x, __mmask8 m) {
  return _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m, x));
}

// 16 bf16 / f16 values (8 of row a in the low 128 bits, 8 of row b above) widened to f32.
template <DType D>
inline __m512 widen16(__m256i h) {
  if constexpr (D == DType::kF16) {
    return _mm512_cvtph_ps(h);
  } else {
    // bf16 = top half of f32: one word permute puts value i in the high half of lane i and the
    // zero mask clears the low halves.
    const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                         7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(__mmask32(0xAAAAAAAAu), idx, _mm512_castsi256_si512(h)));
  }
}

// Weights k..k+7 of row a (low half) and row b (high half), as f32.
template <DType D>
inline __m512 load_w_pair(const uint8_t* a, const uint8_t* b, int64_t k) {
  if constexpr (D == DType::kF32) {
    const auto* fa = reinterpret_cast<const float*>(a);
    const auto* fb = reinterpret_cast<const float*>(b);
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(fa + k)), _mm256_loadu_ps(fb + k), 1);
  } else if constexpr (D == DType::kF16) {
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2 * k)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * k)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  } else {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2 * k));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * k));
    return widen16<D>(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
  }
}

// The same for the last rem < 8 weights of both rows, zero-filled (masked loads: no fault, no
// byte past the rows is used).
template <DType D>
inline __m512 load_w_pair_tail(const uint8_t* a, const uint8_t* b, int64_t k, __mmask8 m) {
  if constexpr (D == DType::kF32) {
    const auto* fa = reinterpret_cast<const float*>(a);
    const auto* fb = reinterpret_cast<const float*>(b);
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_maskz_loadu_ps(m, fa + k)),
                              _mm256_maskz_loadu_ps(m, fb + k), 1);
  } else {
    const __m128i lo = _mm_maskz_loadu_epi16(m, a + 2 * k);
    const __m128i hi = _mm_maskz_loadu_epi16(m, b + 2 * k);
    return widen16<D>(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
  }
}

// The pairs x tokens tile both multi-token kernels share (the few-token kernel with weights
// widened in registers, the prefill tile with weights from scratch): one chunk of P row pairs
// wv[p] against C tokens (8 x values of token c at x + c * ldx, broadcast to both halves; the
// masked form zero-fills lanes >= the tail), each accumulator one lane-ordered fma further.
template <int P, int C>
inline void fma_pairs_tokens(const __m512 (&wv)[P], const float* x, int64_t ldx, __m512 (&acc)[P][C]) {
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const __m512 xv = load_x(x + c * ldx);
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[p][c] = _mm512_fmadd_ps(wv[p], xv, acc[p][c]);
  }
}
template <int P, int C>
inline void fma_pairs_tokens_tail(const __m512 (&wv)[P], const float* x, int64_t ldx, __mmask8 m,
                                  __m512 (&acc)[P][C]) {
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const __m512 xv = load_x_tail(x + c * ldx, m);
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[p][c] = _mm512_fmadd_ps(wv[p], xv, acc[p][c]);
  }
}
// Reduces acc[p][c] into out[c * ldo + 2p] and, when that row exists (2p + 1 < rows), out[c * ldo
// + 2p + 1]: an odd last row rode in the low half of its pair with a copy or zeros above.
template <int P, int C>
inline void store_pairs_tokens(const __m512 (&acc)[P][C], float* out, int64_t ldo, int rows) {
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      float lo, hi;
      reduce_pair(acc[p][c], &lo, &hi);
      out[c * ldo + 2 * p] = lo;
      if (2 * p + 1 < rows) out[c * ldo + 2 * p + 1] = hi;
    }
  }
}

// ---- Decode ----

// 2P weight rows against one token; rows[2p] and rows[2p+1] share accumulator p. pf as in
// matmul_avx2.cpp: a later group of 2P contiguous rows, prefetched in step with this one.
template <DType D, int P>
void dot_pairs_one_token(const uint8_t* const* rows, const float* x, int64_t K, float* out,
                         const uint8_t* pf) {
  constexpr int kElem = D == DType::kF32 ? 4 : 2;
  constexpr int kPfBytes = 2 * P * 8 * kElem;  // bytes of the next group per chunk of 8
  __m512 acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = _mm512_setzero_ps();
  const int64_t k8 = K & ~int64_t(7);
  if (pf != nullptr) {
    for (int64_t k = 0; k < k8; k += 8) {
#pragma GCC unroll 8
      for (int b = 0; b < kPfBytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + k * 2 * P * kElem + b), _MM_HINT_T0);
      const __m512 xv = load_x(x + k);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[p] = _mm512_fmadd_ps(load_w_pair<D>(rows[2 * p], rows[2 * p + 1], k), xv, acc[p]);
    }
  } else {
    for (int64_t k = 0; k < k8; k += 8) {
      const __m512 xv = load_x(x + k);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[p] = _mm512_fmadd_ps(load_w_pair<D>(rows[2 * p], rows[2 * p + 1], k), xv, acc[p]);
    }
  }
  if (const int64_t rem = K - k8; rem != 0) {
    const __mmask8 m = tail_mask(rem);
    const __m512 xv = load_x_tail(x + k8, m);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      acc[p] = _mm512_fmadd_ps(load_w_pair_tail<D>(rows[2 * p], rows[2 * p + 1], k8, m), xv, acc[p]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    reduce_pair(acc[p], out + 2 * p, out + 2 * p + 1);
  }
}

// Rows per decode pass (4 zmm accumulators) and prefetch distance: the same choices as
// matmul_avx2.cpp, so the two paths stream memory alike (task sizes: matmul_row_tasks).
constexpr int kDecodeRows = 8;
constexpr int kPfGroups = 2;

template <DType D>
void decode_block(const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                  const float* x, float* out) {
  int64_t n = n0;
  const uint8_t* rows[kDecodeRows];
  for (; n + kDecodeRows <= n1; n += kDecodeRows) {
    for (int r = 0; r < kDecodeRows; ++r) rows[r] = w + size_t(n + r) * row_bytes;
    const uint8_t* pf = n + (kPfGroups + 1) * kDecodeRows <= n1
                            ? rows[0] + size_t(kPfGroups * kDecodeRows) * row_bytes
                            : nullptr;
    dot_pairs_one_token<D, kDecodeRows / 2>(rows, x, K, out + n, pf);
  }
  for (; n + 2 <= n1; n += 2) {
    rows[0] = w + size_t(n) * row_bytes;
    rows[1] = rows[0] + row_bytes;
    dot_pairs_one_token<D, 1>(rows, x, K, out + n, nullptr);
  }
  if (n < n1) {  // an odd last row rides in both halves; the copy's result is dropped
    rows[0] = rows[1] = w + size_t(n) * row_bytes;
    float two[2];
    dot_pairs_one_token<D, 1>(rows, x, K, two, nullptr);
    out[n] = two[0];
  }
}

// ---- A few tokens (2..kFewTokens at a time) ----

// 2P weight rows against C tokens: each pair's 8 weights are loaded and widened once per chunk
// and meet all C tokens (acc[p][c]: pair p, token c), so the decode kernel's two shuffles per
// pair are paid once per C FMAs instead of once per FMA, and the weights stream from memory
// once. Every lane's fma sequence is the contract's, as in dot_pairs_one_token. n_rows: rows
// that exist (an odd last row's pair repeats it in the high half, which is not stored). pf as there.
template <DType D, int P, int C>
void dot_pairs_tokens(const uint8_t* const* rows, const float* x, int64_t ldx, int64_t K, float* out, int64_t ldo,
                      int n_rows, const uint8_t* pf) {
  constexpr int kElem = D == DType::kF32 ? 4 : 2;
  constexpr int kPfBytes = 2 * P * 8 * kElem;
  __m512 acc[P][C];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[p][c] = _mm512_setzero_ps();
  }
  const int64_t k8 = K & ~int64_t(7);
  for (int64_t k = 0; k < k8; k += 8) {
    if (pf != nullptr) {
#pragma GCC unroll 8
      for (int b = 0; b < kPfBytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + k * 2 * P * kElem + b), _MM_HINT_T0);
    }
    __m512 wv[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) wv[p] = load_w_pair<D>(rows[2 * p], rows[2 * p + 1], k);
    fma_pairs_tokens<P, C>(wv, x + k, ldx, acc);
  }
  if (const int64_t rem = K - k8; rem != 0) {
    const __mmask8 m = tail_mask(rem);
    __m512 wv[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) wv[p] = load_w_pair_tail<D>(rows[2 * p], rows[2 * p + 1], k8, m);
    fma_pairs_tokens_tail<P, C>(wv, x + k8, ldx, m, acc);
  }
  store_pairs_tokens<P, C>(acc, out, ldo, n_rows);
}

// Tokens per pass of the few-token kernel, and its pairs per pass for C tokens: P x C
// accumulators + P weight registers + 1 x register within the 32 zmm (C <= 6: 4 pairs, 8 rows as
// the decode kernel; 7..8: 2 pairs, measured 0.146-0.169 ms vs 0.167-0.188 with 3 pairs at
// T = 8 for the 512 x 2048 bf16 product on Zen 4).
constexpr int kFewTokens = 8;
constexpr int few_pairs(int C) { return C <= 6 ? 4 : 2; }

// Rows [n0, n1) for C tokens: groups of few_pairs(C) pairs, then one pair at a time, then an odd
// last row (its pair's second pointer repeats it; the copy's outputs are not stored).
template <DType D, int C>
void few_tokens_rows(const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, int64_t K, const float* x,
                     int64_t ldx, float* out, int64_t ldo) {
  constexpr int P = few_pairs(C);
  int64_t n = n0;
  const uint8_t* rows[2 * P];
  for (; n + 2 * P <= n1; n += 2 * P) {
    for (int r = 0; r < 2 * P; ++r) rows[r] = w + size_t(n + r) * row_bytes;
    // The 2-pair form (7-8 tokens) streams without the software prefetch: on the Xeon with two
    // 512-bit FMA ports it measured 1.05-1.12x faster without it (quant_bench --t 8, bf16 2048 x
    // 2048, 2 threads: 0.44-0.46 -> 0.40-0.41 ms); the 4-pair forms and decode showed no difference.
    const uint8_t* pf = P > 2 && n + (kPfGroups + 1) * 2 * P <= n1 ? rows[0] + size_t(kPfGroups * 2 * P) * row_bytes : nullptr;
    dot_pairs_tokens<D, P, C>(rows, x, ldx, K, out + n, ldo, 2 * P, pf);
  }
  for (; n < n1; n += 2) {
    rows[0] = w + size_t(n) * row_bytes;
    rows[1] = n + 1 < n1 ? rows[0] + row_bytes : rows[0];
    dot_pairs_tokens<D, 1, C>(rows, x, ldx, K, out + n, ldo, int(n1 - n < 2 ? n1 - n : 2), nullptr);
  }
}

template <DType D>
void few_tokens_block(const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, int64_t K, const float* x,
                      int64_t ldx, int64_t T, float* out, int64_t ldo) {
  if (!matmul_few_tokens()) {
    for (int64_t t = 0; t < T; ++t) decode_block<D>(w, row_bytes, n0, n1, K, x + t * ldx, out + t * ldo);
    return;
  }
  for (int64_t t = 0; t < T; t += kFewTokens) {
    const float* xt = x + t * ldx;
    float* ot = out + t * ldo;
    switch (T - t < kFewTokens ? T - t : kFewTokens) {
      case 1: decode_block<D>(w, row_bytes, n0, n1, K, xt, ot); break;
      case 2: few_tokens_rows<D, 2>(w, row_bytes, n0, n1, K, xt, ldx, ot, ldo); break;
      case 3: few_tokens_rows<D, 3>(w, row_bytes, n0, n1, K, xt, ldx, ot, ldo); break;
      case 4: few_tokens_rows<D, 4>(w, row_bytes, n0, n1, K, xt, ldx, ot, ldo); break;
      case 5: few_tokens_rows<D, 5>(w, row_bytes, n0, n1, K, xt, ldx, ot, ldo); break;
      case 6: few_tokens_rows<D, 6>(w, row_bytes, n0, n1, K, xt, ldx, ot, ldo); break;
      case 7: few_tokens_rows<D, 7>(w, row_bytes, n0, n1, K, xt, ldx, ot, ldo); break;
      default: few_tokens_rows<D, 8>(w, row_bytes, n0, n1, K, xt, ldx, ot, ldo); break;
    }
  }
}

// ---- Prefill ----

constexpr int kTilePairs = 4;
constexpr int kTileTokens = 6;
// K block: 8 rows x 512 floats of widened weights (16 KiB) stay in L1 while a tile's tokens
// sweep them. A multiple of 8, so only the last block can hold a partial chunk.
constexpr int64_t kPrefillKBlock = 512;
// Tokens per block: 48 x 512 floats of x (96 KiB) stay in L2 for every row pair of the task.
constexpr int64_t kTokenBlock = 48;
static_assert(kTokenBlock % kTileTokens == 0, "token blocks hold whole tiles");
static_assert(kMatmulPrefillTokenGrain % kTokenBlock == 0, "token ranges of tasks hold whole blocks");
// Rows per prefill task: up to kPrefillMaxRows while their widened f32 copy fits in
// kPrefillWidenedBytes (half of Zen4's 1 MiB L2, a quarter of Sapphire Rapids' 2 MiB). Each
// x row a task reads from L3 then feeds that many rows instead of 16: at 16 rows a 16-core
// prefill pulled ~8 FLOP per byte of x from L3, at 64 rows 32.
constexpr int64_t kPrefillWidenedBytes = int64_t(512) << 10;
constexpr int64_t kPrefillMaxRows = 64;

// Tile of P row pairs x C tokens over chunks [0, n_full) plus, when tail_rem != 0, one masked
// chunk. pw[p]: pair p's interleaved weights at the block start (16 floats per chunk, tail lanes
// zero). Accumulators persist across K blocks in acc (16 floats per pair and token, token-major,
// acc_ld floats apart), so every lane's sum stays in order. last: reduce into out[c*ldo + 2p]
// (and 2p + 1 when that row exists: rows counts the rows of this tile).
template <int P, int C>
void tile(const float* const* pw, const float* x, int64_t ldx, int64_t n_full, int64_t tail_rem,
          bool first, bool last, float* acc_buf, int64_t acc_ld, float* out, int64_t ldo, int rows) {
  __m512 acc[P][C];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 6
    for (int c = 0; c < C; ++c) acc[p][c] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc_buf + c * acc_ld + 16 * p);
  }
  for (int64_t i = 0; i < n_full; ++i) {
    __m512 wv[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) wv[p] = _mm512_load_ps(pw[p] + 16 * i);
    fma_pairs_tokens<P, C>(wv, x + 8 * i, ldx, acc);
  }
  if (tail_rem != 0) {
    const __mmask8 m = tail_mask(tail_rem);
    __m512 wv[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) wv[p] = _mm512_load_ps(pw[p] + 16 * n_full);
    fma_pairs_tokens_tail<P, C>(wv, x + 8 * n_full, ldx, m, acc);
  }
  if (!last) {
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
#pragma GCC unroll 6
      for (int c = 0; c < C; ++c) _mm512_store_ps(acc_buf + c * acc_ld + 16 * p, acc[p][c]);
    }
    return;
  }
  store_pairs_tokens<P, C>(acc, out, ldo, rows);
}

// One tile row (P pairs) over tokens [0, T) in tiles of kTileTokens and a remainder tile.
template <int P>
void tile_tokens(const float* const* pw, const float* x, int64_t ldx, int64_t T, int64_t n_full,
                 int64_t tail_rem, bool first, bool last, float* acc, float* out, int64_t ldo, int rows) {
  const int64_t acc_ld = 16 * P;
  int64_t t = 0;
  for (; t + kTileTokens <= T; t += kTileTokens)
    tile<P, kTileTokens>(pw, x + t * ldx, ldx, n_full, tail_rem, first, last, acc + t * acc_ld, acc_ld, out + t * ldo, ldo, rows);
  const float* xr = x + t * ldx;
  float* ar = acc + t * acc_ld;
  float* orr = out + t * ldo;
  switch (T - t) {
    case 5: tile<P, 5>(pw, xr, ldx, n_full, tail_rem, first, last, ar, acc_ld, orr, ldo, rows); break;
    case 4: tile<P, 4>(pw, xr, ldx, n_full, tail_rem, first, last, ar, acc_ld, orr, ldo, rows); break;
    case 3: tile<P, 3>(pw, xr, ldx, n_full, tail_rem, first, last, ar, acc_ld, orr, ldo, rows); break;
    case 2: tile<P, 2>(pw, xr, ldx, n_full, tail_rem, first, last, ar, acc_ld, orr, ldo, rows); break;
    case 1: tile<P, 1>(pw, xr, ldx, n_full, tail_rem, first, last, ar, acc_ld, orr, ldo, rows); break;
    default: break;
  }
}

// Rows [n0, n1) widened into scratch by pair: pair p, chunk c at scratch[(p*chunks + c)*16],
// [row 2p lanes | row 2p+1 lanes]. The tail chunk's missing lanes and a missing odd row are +0,
// which makes the padded lanes' fma(+0, x, acc) = fma(+0, +0, acc) as x is zero-filled there too.
template <DType D>
void widen_pairs(const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, int64_t K, float* scratch) {
  const int64_t chunks = (K + 7) / 8, k8 = K & ~int64_t(7);
  for (int64_t n = n0; n < n1; n += 2) {
    float* dst = scratch + ((n - n0) / 2) * chunks * 16;
    const uint8_t* a = w + size_t(n) * row_bytes;
    const bool has_b = n + 1 < n1;
    const uint8_t* b = has_b ? a + row_bytes : a;  // a missing odd row reads row a again, then zeroed
    for (int64_t k = 0; k < k8; k += 8) {
      __m512 v = load_w_pair<D>(a, b, k);
      if (!has_b) v = _mm512_maskz_mov_ps(__mmask16(0x00FF), v);
      _mm512_store_ps(dst + 2 * k, v);
    }
    if (const int64_t rem = K - k8; rem != 0) {
      __m512 v = load_w_pair_tail<D>(a, b, k8, tail_mask(rem));
      if (!has_b) v = _mm512_maskz_mov_ps(__mmask16(0x00FF), v);
      _mm512_store_ps(dst + 2 * k8, v);
    }
  }
}

// Prefill of rows [n0, n1) (matmul_avx512_prefill_rows of them) for all T tokens.
void prefill_block(DType wtype, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                   const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo) {
  // 64-byte aligned, so every zmm load of the widened weights and accumulators stays inside one
  // cache line (a plain std::vector of this size comes from mmap at 16 mod 64: every one split).
  thread_local AlignedVector<float> scratch_buf, acc_buf;
  const int64_t n_rows = n1 - n0, pairs = (n_rows + 1) / 2, chunks = (K + 7) / 8;
  if (scratch_buf.size() < size_t(pairs * chunks * 16)) scratch_buf.resize(size_t(pairs * chunks * 16));
  if (acc_buf.size() < size_t(pairs * kTokenBlock * 16)) acc_buf.resize(size_t(pairs * kTokenBlock * 16));
  float* scratch = scratch_buf.data();
  float* acc = acc_buf.data();
  switch (wtype) {
    case DType::kF16: widen_pairs<DType::kF16>(w, row_bytes, n0, n1, K, scratch); break;
    case DType::kBF16: widen_pairs<DType::kBF16>(w, row_bytes, n0, n1, K, scratch); break;
    default: widen_pairs<DType::kF32>(w, row_bytes, n0, n1, K, scratch); break;
  }
  for (int64_t t0 = 0; t0 < T; t0 += kTokenBlock) {
    const int64_t tb = T - t0 < kTokenBlock ? T - t0 : kTokenBlock;
    for (int64_t kb = 0; kb < K; kb += kPrefillKBlock) {
      const bool first = kb == 0, last = kb + kPrefillKBlock >= K;
      const int64_t len = last ? K - kb : kPrefillKBlock;
      const int64_t n_full = len / 8, tail_rem = len % 8;
      const float* xb = x + t0 * ldx + kb;
      for (int64_t p0 = 0; p0 < pairs; p0 += kTilePairs) {
        const int p_count = int(pairs - p0 < kTilePairs ? pairs - p0 : kTilePairs);
        const float* pw[kTilePairs];
        for (int p = 0; p < p_count; ++p) pw[p] = scratch + ((p0 + p) * chunks + kb / 8) * 16;
        const int rows = int(n_rows - 2 * p0 < 2 * kTilePairs ? n_rows - 2 * p0 : 2 * kTilePairs);
        // Each group of pairs owns tb * 16 * p_count accumulator floats.
        float* group_acc = acc + p0 * kTokenBlock * 16;
        float* group_out = out + t0 * ldo + n0 + 2 * p0;
        switch (p_count) {
          case 4: tile_tokens<4>(pw, xb, ldx, tb, n_full, tail_rem, first, last, group_acc, group_out, ldo, rows); break;
          case 3: tile_tokens<3>(pw, xb, ldx, tb, n_full, tail_rem, first, last, group_acc, group_out, ldo, rows); break;
          case 2: tile_tokens<2>(pw, xb, ldx, tb, n_full, tail_rem, first, last, group_acc, group_out, ldo, rows); break;
          default: tile_tokens<1>(pw, xb, ldx, tb, n_full, tail_rem, first, last, group_acc, group_out, ldo, rows); break;
        }
      }
    }
  }
}

// The streaming kernel of wtype: the decode kernel for one token, the few-token kernel for more
// (kFewTokens at a time), or the decode kernel once per token when matmul_few_tokens() is off.
void streaming_rows(DType wtype, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                    const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo) {
  switch (wtype) {
    case DType::kF16: few_tokens_block<DType::kF16>(w, row_bytes, n0, n1, K, x, ldx, T, out, ldo); break;
    case DType::kBF16: few_tokens_block<DType::kBF16>(w, row_bytes, n0, n1, K, x, ldx, T, out, ldo); break;
    case DType::kF32: few_tokens_block<DType::kF32>(w, row_bytes, n0, n1, K, x, ldx, T, out, ldo); break;
    default: break;  // unreachable: matmul_row_tasks refuses other dtypes
  }
}

}  // namespace

int64_t matmul_avx512_prefill_rows(int64_t K) {
  int64_t rows = kPrefillWidenedBytes / (4 * (K > 0 ? K : 1));
  rows = rows < kMatmulRowsPerTask ? kMatmulRowsPerTask : rows > kPrefillMaxRows ? kPrefillMaxRows : rows;
  return rows / kMatmulRowsPerTask * kMatmulRowsPerTask;
}

void matmul_avx512_boundary(int64_t streaming_tokens, DType wtype, const void* w, int64_t N, int64_t K,
                            const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool) {
  matmul_row_tasks(streaming_rows, prefill_block, matmul_avx512_prefill_rows(K), streaming_tokens, wtype, w, N, K, x,
                   ldx, T, out, ldo, pool);
}

void matmul_avx512(DType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                   int64_t T, float* out, int64_t ldo, ThreadPool* pool) {
  matmul_avx512_boundary(matmul_streaming_tokens_or(kMatmulStreamingTokensAvx512), wtype, w, N, K, x, ldx, T, out,
                         ldo, pool);
}

}  // namespace weft
