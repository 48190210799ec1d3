// AVX2/FMA/F16C matrix products: each ymm accumulator is one whole dot product in the order of
// matmul.h, so tiling rows x tokens adds speed without changing a single output bit.
//
// Measured on the 2-core dev VM (Xeon @ 2.2 GHz, noisy, shared with other builds):
//   decode  N=4096 K=2048 bf16 T=1: (filled in below)
//   prefill N=4096 K=2048 bf16 T=64: (filled in below)
#include <immintrin.h>

#include <cstring>
#include <vector>

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
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    if constexpr (D == DType::kF16) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
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
template <DType D, int R>
void dot_rows_one_token(const uint8_t* const* rows, const float* x, int64_t K, float* out) {
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t k8 = K & ~int64_t(7);
  for (int64_t k = 0; k < k8; k += 8) {
    __m256 xv = _mm256_loadu_ps(x + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(load_w8<D>(rows[r], k), xv, acc[r]);
  }
  if (const int64_t rem = K - k8; rem != 0) {
    const __m256i mask = tail_mask(rem);
    __m256 xv = _mm256_maskload_ps(x + k8, mask);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(load_w_tail<D>(rows[r], k8, rem, mask), xv, acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = reduce8(acc[r]);
}

// Prefill register tile: R f32 weight rows x C tokens, R*C independent accumulators.
// out[c*ldo + r] receives row r, token c.
template <int R, int C>
void dot_tile_f32(const float* const* rows, const float* x, int64_t ldx, int64_t K, float* out,
                  int64_t ldo) {
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  const int64_t k8 = K & ~int64_t(7);
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
  if (const int64_t rem = K - k8; rem != 0) {
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

constexpr int kTileRows = 4;
constexpr int kTileTokens = 2;

template <DType D>
void decode_block(const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                  const float* x, float* out) {
  int64_t n = n0;
  const uint8_t* rows[kTileRows];
  for (; n + kTileRows <= n1; n += kTileRows) {
    for (int r = 0; r < kTileRows; ++r) rows[r] = w + size_t(n + r) * row_bytes;
    dot_rows_one_token<D, kTileRows>(rows, x, K, out + n);
  }
  for (; n < n1; ++n) {
    rows[0] = w + size_t(n) * row_bytes;
    dot_rows_one_token<D, 1>(rows, x, K, out + n);
  }
}

template <int R>
void prefill_rows(const float* const* rows, int64_t K, const float* x, int64_t ldx, int64_t T,
                  float* out, int64_t ldo) {
  int64_t t = 0;
  for (; t + kTileTokens <= T; t += kTileTokens) {
    dot_tile_f32<R, kTileTokens>(rows, x + t * ldx, ldx, K, out + t * ldo, ldo);
  }
  for (; t < T; ++t) dot_tile_f32<R, 1>(rows, x + t * ldx, ldx, K, out + t * ldo, ldo);
}

// Prefill: each group of rows is widened to f32 once into per-thread scratch, then reused by
// every token, so the weights are read from memory once per call rather than once per token.
void prefill_block(DType wtype, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1,
                   int64_t K, const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo) {
  thread_local std::vector<float> scratch;
  if (wtype != DType::kF32 && scratch.size() < size_t(kTileRows * K)) {
    scratch.resize(size_t(kTileRows * K));
  }
  const float* rows[kTileRows];
  for (int64_t n = n0; n < n1; n += kTileRows) {
    const int r_count = int(n1 - n < kTileRows ? n1 - n : kTileRows);
    for (int r = 0; r < r_count; ++r) {
      const uint8_t* src = w + size_t(n + r) * row_bytes;
      if (wtype == DType::kF32) {
        rows[r] = reinterpret_cast<const float*>(src);
      } else {
        float* dst = scratch.data() + r * K;
        convert_row_to_f32_avx2(wtype, src, dst, K);
        rows[r] = dst;
      }
    }
    switch (r_count) {
      case 4: prefill_rows<4>(rows, K, x, ldx, T, out + n, ldo); break;
      case 3: prefill_rows<3>(rows, K, x, ldx, T, out + n, ldo); break;
      case 2: prefill_rows<2>(rows, K, x, ldx, T, out + n, ldo); break;
      default: prefill_rows<1>(rows, K, x, ldx, T, out + n, ldo); break;
    }
  }
}

}  // namespace

void matmul_avx2(DType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                 int64_t T, float* out, int64_t ldo, ThreadPool* pool) {
  if (N <= 0 || T <= 0 || K <= 0) return;
  const size_t row_bytes = dtype_bytes(wtype, size_t(K));
  const auto* wbytes = static_cast<const uint8_t*>(w);
  auto task = [&](int64_t i) {
    const int64_t n0 = i * kMatmulRowsPerTask;
    const int64_t n1 = n0 + kMatmulRowsPerTask < N ? n0 + kMatmulRowsPerTask : N;
    if (T == 1) {
      switch (wtype) {
        case DType::kF16: decode_block<DType::kF16>(wbytes, row_bytes, n0, n1, K, x, out); break;
        case DType::kBF16: decode_block<DType::kBF16>(wbytes, row_bytes, n0, n1, K, x, out); break;
        default: decode_block<DType::kF32>(wbytes, row_bytes, n0, n1, K, x, out); break;
      }
    } else {
      prefill_block(wtype, wbytes, row_bytes, n0, n1, K, x, ldx, T, out, ldo);
    }
  };
  const int64_t n_tasks = ceil_div(N, kMatmulRowsPerTask);
  // Tiny products are not worth waking the workers; values do not depend on this choice.
  const bool parallel = pool != nullptr && pool->size() > 1 && n_tasks > 1 && N * K * T >= 32768;
  if (parallel) {
    pool->parallel_for(n_tasks, task);
  } else {
    for (int64_t i = 0; i < n_tasks; ++i) task(i);
  }
}

}  // namespace weft
