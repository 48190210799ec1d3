// AVX2/FMA/F16C matrix products: each ymm accumulator is one whole dot product in the order of
// matmul.h, so tiling rows x tokens adds speed without changing a single output bit.
//
// Measured on this 2-core dev VM (AMD EPYC, 1 MiB L2/core, 32 MiB L3), N=4096 K=2048, fastest
// of many calls, weights cycled over 128 MiB so they come from DRAM; the VM had load ~6 from
// other builds, so the 2-thread figures mostly show the second core being busy:
//   decode  T=1  bf16: 18.6 GB/s of weights on 1 thread, 18.6 GB/s on 2
//                f16:  19.9 / 19.7 GB/s;  f32: 23.7 / 38.2 GB/s
//   prefill T=64 bf16: 41 GFLOP/s on 1 thread, 39 on 2;  f16: 36 / 38;  f32: 50 / 42
// (matmul_test --gtest_also_run_disabled_tests --gtest_filter='*Throughput*' prints these.)
//
// Decode (T=1) rework, measured side by side on the same machine (quiet-ish, load ~1.3):
//   8 rows per pass (was 4), decode tasks of >= 64 KiB of weights (was 16 rows), software
//   prefetch of the row group 2 groups ahead when it lies in the same task (short rows only).
//   Per-call bf16 GB/s, 2 threads, weights cycled over 256 MiB, median of 5 (new thread pool in
//   both; the machine's pure AVX2 read bandwidth in the same runs: ~26-29 GB/s):
//     512 x 2048 (expert gate/up)  23.7 -> 27.1 GB/s     2048 x 512 (expert down) 15.8 -> 18.7
//     4096 x 2048                  24.6 -> 26.7 GB/s
//   End to end, strict-tier decode of the scaled Qwen3.5-35B-A3B (604 MiB/token), tok/s of
//   4 interleaved rounds of `weft bench -m /tmp/q35s --ctx 1024 --arms f16 --repeats 5 --gen 16
//   --bandwidth-mib 64` (model: `weft synth --preset qwen3.5-35b-a3b -o /tmp/q35s --layers 4
//   --experts 16 --vocab 32768`):
//     original             24.6 14.9 26.5 27.1
//     + spinning pool      29.9 28.6 29.1 30.4   (thread_pool.cpp)
//     + this decode kernel 32.7 32.3 32.7 33.1   -> ~1.11x over the pool alone, ~1.25x overall;
//   32.7 tok/s x 604 MiB = 20.7 GB/s, 72% of the quiet copy figure 28.75 GB/s (was ~57%).
//   Summation order per output is untouched: only which rows share a pass and which thread
//   computes them changed.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vec_convert.h"

namespace weft {

namespace {

// Fixed horizontal reduction: s4[i] = v[i] + v[i+4], s2[i] = s4[i] + s4[i+2], s2[0] + s2[1].
inline float reduce8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// Lanes j < rem set.
inline __m256i tail_mask(int64_t rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(rem)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Eight weights starting at element k of a row, widened to f32.
template <DType D>
inline __m256 load_w8(const uint8_t* row, int64_t k) {
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else {
    if constexpr (D == DType::kF16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
    } else {
      // bf16 is the top half of an f32: one byte shuffle of the 8 values (broadcast to both
      // 128-bit lanes) puts element i in the high 16 bits of lane i and zeros below; one uop
      // fewer than zero-extend then shift.
      const __m256i spread = _mm256_setr_epi8(
          -128, -128, 0, 1, -128, -128, 2, 3, -128, -128, 4, 5, -128, -128, 6, 7,
          -128, -128, 8, 9, -128, -128, 10, 11, -128, -128, 12, 13, -128, -128, 14, 15);
      __m256i h = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
      return _mm256_castsi256_ps(_mm256_shuffle_epi8(h, spread));
    }
  }
}

// The last rem (< 8) weights of a row, zero-filled; never touches bytes past the row, since the
// row may end a memory-mapped file.
template <DType D>
inline __m256 load_w_tail(const uint8_t* row, int64_t k, int64_t rem, __m256i mask) {
  if constexpr (D == DType::kF32) {
    return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + k, mask);
  } else {
    alignas(16) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tmp, row + 2 * k, size_t(rem) * 2);
    return load_w8<D>(reinterpret_cast<const uint8_t*>(tmp), 0);
  }
}

// Decode: R weight rows against one token, weights streamed once and widened in registers.
// pf, when not null, is the start of a later group of R rows (R * row_bytes contiguous bytes):
// each chunk prefetches the same fraction of it that the chunk consumes of this group, so the
// group is in cache when it starts. Prefetches read no values, so they change nothing.
template <DType D, int R>
void dot_rows_one_token(const uint8_t* const* rows, const float* x, int64_t K, float* out,
                        const uint8_t* pf) {
  constexpr int kElem = D == DType::kF32 ? 4 : 2;
  constexpr int kPfBytes = R * 8 * kElem;  // bytes of the next group per chunk of 8
  __m256 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t k8 = K & ~int64_t(7);
  if (pf != nullptr) {
    for (int64_t k = 0; k < k8; k += 8) {
#pragma GCC unroll 8
      for (int p = 0; p < kPfBytes; p += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + k * R * kElem + p), _MM_HINT_T0);
      __m256 xv = _mm256_loadu_ps(x + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(load_w8<D>(rows[r], k), xv, acc[r]);
    }
  } else {
    for (int64_t k = 0; k < k8; k += 8) {
      __m256 xv = _mm256_loadu_ps(x + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(load_w8<D>(rows[r], k), xv, acc[r]);
    }
  }
  if (const int64_t rem = K - k8; rem != 0) {
    const __m256i mask = tail_mask(rem);
    __m256 xv = _mm256_maskload_ps(x + k8, mask);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(load_w_tail<D>(rows[r], k8, rem, mask), xv, acc[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) out[r] = reduce8(acc[r]);
}

// Prefill register tile: R f32 weight rows x C tokens over k in [0, len), R*C independent
// accumulators. Accumulators live in acc (8 floats per dot product, token-major with stride
// acc_ld floats between tokens) across K blocks: storing and reloading them keeps every lane's
// summation exactly in order. last: len may end in a partial chunk and the sums are reduced into
// out[c*ldo + r] (row r, token c).
template <int R, int C>
void dot_tile_f32(const float* const* rows, const float* x, int64_t ldx, int64_t len, bool first,
                  bool last, float* acc_buf, int64_t acc_ld, float* out, int64_t ldo) {
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      acc[r][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc_buf + c * acc_ld + 8 * r);
    }
  }
  const int64_t k8 = len & ~int64_t(7);
  for (int64_t k = 0; k < k8; k += 8) {
    __m256 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(rows[r] + k);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      __m256 xv = _mm256_loadu_ps(x + c * ldx + k);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
    }
  }
  if (!last) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) _mm256_storeu_ps(acc_buf + c * acc_ld + 8 * r, acc[r][c]);
    }
    return;
  }
  if (const int64_t rem = len - k8; rem != 0) {
    const __m256i mask = tail_mask(rem);
    __m256 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = _mm256_maskload_ps(rows[r] + k8, mask);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      __m256 xv = _mm256_maskload_ps(x + c * ldx + k8, mask);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) out[c * ldo + r] = reduce8(acc[r][c]);
  }
}

// Decode: 8 rows streamed together, sharing each load of x: 8 FMA chains hide FMA latency and
// 8 concurrent weight streams keep more cache misses in flight than 4 did.
constexpr int kDecodeRows = 8;
// While a group of rows is computed, the group this many groups ahead (inside the same task) is
// prefetched; rows of 4 KiB or more are left to the hardware prefetcher (measured equal or better).
constexpr int kPfGroups = 2;
// Prefill register tile: kTileRows x kTileTokens accumulators plus kTileRows weight registers
// and one x register must fit the 16 ymm registers.
constexpr int kTileRows = 4;
constexpr int kTileTokens = 3;

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
    dot_rows_one_token<D, kDecodeRows>(rows, x, K, out + n, pf);
  }
  for (; n + 4 <= n1; n += 4) {
    for (int r = 0; r < 4; ++r) rows[r] = w + size_t(n + r) * row_bytes;
    dot_rows_one_token<D, 4>(rows, x, K, out + n, nullptr);
  }
  for (; n < n1; ++n) {
    rows[0] = w + size_t(n) * row_bytes;
    dot_rows_one_token<D, 1>(rows, x, K, out + n, nullptr);
  }
}

// K block of the prefill: 4 rows x 512 floats of weights (8 KiB) plus a token tile stay in L1
// while the tiles sweep the tokens. A multiple of 8, so only the last block has a partial chunk.
constexpr int64_t kPrefillKBlock = 512;
// Tokens per block of the prefill (whole tiles): 96 x 2 KiB of x per K block, inside a Zen 3 L2
// (512 KiB) beside the task's widened rows (32 KiB) and accumulators.
constexpr int64_t kPrefillTokenBlock = 96;
static_assert(kPrefillTokenBlock % kTileTokens == 0, "token blocks hold whole tiles");

template <int R>
void prefill_rows(const float* const* rows, int64_t len, bool first, bool last, const float* x,
                  int64_t ldx, int64_t T, float* acc, float* out, int64_t ldo) {
  int64_t t = 0;
  for (; t + kTileTokens <= T; t += kTileTokens) {
    dot_tile_f32<R, kTileTokens>(rows, x + t * ldx, ldx, len, first, last, acc + t * 8 * R, 8 * R,
                                 out + t * ldo, ldo);
  }
  for (; t < T; ++t) {
    dot_tile_f32<R, 1>(rows, x + t * ldx, ldx, len, first, last, acc + t * 8 * R, 8 * R,
                       out + t * ldo, ldo);
  }
}

// Prefill: each K block of the task's rows is widened to f32 once into per-thread scratch
// (16 x 512 floats, 32 KiB) and reused by every token, so the weights are read from memory once
// per call rather than once per token.
void prefill_block(DType wtype, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1,
                   int64_t K, const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo) {
  thread_local std::vector<float> scratch, acc;
  const int64_t n_rows = n1 - n0;
  const size_t elem = dtype_size(wtype);
  if (scratch.size() < size_t(n_rows * kPrefillKBlock)) scratch.resize(size_t(n_rows * kPrefillKBlock));
  if (acc.size() < size_t(n_rows * T * 8)) acc.resize(size_t(n_rows * T * 8));
  for (int64_t kb = 0; kb < K; kb += kPrefillKBlock) {
    const bool first = kb == 0, last = kb + kPrefillKBlock >= K;
    const int64_t len = last ? K - kb : kPrefillKBlock;
    const float* row_ptr[kMatmulRowsPerTask];
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* src = w + size_t(n0 + r) * row_bytes + size_t(kb) * elem;
      if (wtype == DType::kF32) {
        row_ptr[r] = reinterpret_cast<const float*>(src);
      } else {
        float* dst = scratch.data() + r * kPrefillKBlock;
        convert_row_to_f32_avx2(wtype, src, dst, len);
        row_ptr[r] = dst;
      }
    }
    // Token blocks: a block's x rows (kPrefillTokenBlock x 2 KiB) stay in L2 while every row
    // group of the task sweeps them, instead of streaming all T tokens from L3 once per group.
    // Which token an accumulator belongs to is unchanged, so are the sums (same bits).
    for (int64_t t0 = 0; t0 < T; t0 += kPrefillTokenBlock) {
      const int64_t tb = T - t0 < kPrefillTokenBlock ? T - t0 : kPrefillTokenBlock;
      for (int64_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
        const int r_count = int(n_rows - r0 < kTileRows ? n_rows - r0 : kTileRows);
        const float* rows[kTileRows];
        for (int r = 0; r < r_count; ++r) rows[r] = row_ptr[r0 + r];
        // Each group of rows owns T * 8 * r_count accumulator floats, token t at t * 8 * r_count.
        float* group_acc = acc.data() + r0 * T * 8 + t0 * 8 * r_count;
        float* group_out = out + t0 * ldo + n0 + r0;
        const float* xb = x + t0 * ldx + kb;
        switch (r_count) {
          case 4: prefill_rows<4>(rows, len, first, last, xb, ldx, tb, group_acc, group_out, ldo); break;
          case 3: prefill_rows<3>(rows, len, first, last, xb, ldx, tb, group_acc, group_out, ldo); break;
          case 2: prefill_rows<2>(rows, len, first, last, xb, ldx, tb, group_acc, group_out, ldo); break;
          default: prefill_rows<1>(rows, len, first, last, xb, ldx, tb, group_acc, group_out, ldo); break;
        }
      }
    }
  }
}

// The streaming kernel: the decode kernel of wtype once per token (the first token streams the
// task's rows from memory, the others read them from L2; measured faster than widening once up
// to 8 tokens on Zen 3, matmul.h).
void streaming_rows(DType wtype, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                    const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * ldx;
    float* ot = out + t * ldo;
    switch (wtype) {
      case DType::kF16: decode_block<DType::kF16>(w, row_bytes, n0, n1, K, xt, ot); break;
      case DType::kBF16: decode_block<DType::kBF16>(w, row_bytes, n0, n1, K, xt, ot); break;
      case DType::kF32: decode_block<DType::kF32>(w, row_bytes, n0, n1, K, xt, ot); break;
      default: break;  // unreachable: matmul_row_tasks refuses other dtypes
    }
  }
}

}  // namespace

void matmul_avx2_boundary(int64_t streaming_tokens, DType wtype, const void* w, int64_t N, int64_t K, const float* x,
                          int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool) {
  matmul_row_tasks(streaming_rows, prefill_block, kMatmulRowsPerTask, streaming_tokens, wtype, w, N, K, x, ldx, T,
                   out, ldo, pool);
}

void matmul_avx2(DType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                 int64_t T, float* out, int64_t ldo, ThreadPool* pool) {
  matmul_avx2_boundary(matmul_streaming_tokens_or(kMatmulStreamingTokensAvx2), wtype, w, N, K, x, ldx, T, out, ldo,
                       pool);
}

}  // namespace weft
