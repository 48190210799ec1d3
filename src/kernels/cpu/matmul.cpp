// Matrix-product dispatch and the scalar reference that fixes the summation order (see matmul.h).
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/vec_convert.h"

namespace weft {

namespace {

// The contract's order, written out lane by lane; matmul_avx2.cpp does the same with one ymm
// register per dot product. std::fma because the vector path uses fused multiply-add.
float dot_reference_order(const float* w, const float* x, int64_t K) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t k8 = K & ~int64_t(7);
  for (int64_t k = 0; k < k8; k += 8) {
    for (int j = 0; j < 8; ++j) acc[j] = std::fma(w[k + j], x[k + j], acc[j]);
  }
  const int64_t rem = K - k8;
  if (rem != 0) {
    // Padded lanes still take fma(+0, +0, acc): that turns an acc of -0 into +0, as the vector
    // code does with its zero-filled masked loads.
    for (int j = 0; j < 8; ++j) {
      float wv = j < rem ? w[k8 + j] : 0.0f;
      float xv = j < rem ? x[k8 + j] : 0.0f;
      acc[j] = std::fma(wv, xv, acc[j]);
    }
  }
  float s4[4], s2[2];
  for (int i = 0; i < 4; ++i) s4[i] = acc[i] + acc[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}

// Runs fn over row blocks of kMatmulRowsPerTask, on the pool when there is one.
template <typename Fn>
void for_each_row_block(int64_t N, ThreadPool* pool, const Fn& fn) {
  const int64_t n_tasks = ceil_div(N, kMatmulRowsPerTask);
  auto task = [&](int64_t i) {
    const int64_t n0 = i * kMatmulRowsPerTask;
    const int64_t n1 = n0 + kMatmulRowsPerTask < N ? n0 + kMatmulRowsPerTask : N;
    fn(n0, n1);
  };
  if (pool == nullptr || pool->size() <= 1 || n_tasks <= 1) {
    for (int64_t i = 0; i < n_tasks; ++i) task(i);
  } else {
    pool->parallel_for(n_tasks, task);
  }
}

}  // namespace

bool matmul_supports(DType wtype) {
  return wtype == DType::kF32 || wtype == DType::kF16 || wtype == DType::kBF16;
}

void matmul_scalar(DType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                   int64_t T, float* out, int64_t ldo, ThreadPool* pool) {
  WEFT_CHECK(matmul_supports(wtype), "matmul: this weight dtype has no kernel");
  if (N <= 0 || T <= 0 || K <= 0) return;
  const size_t row_bytes = dtype_bytes(wtype, size_t(K));
  const auto* wbytes = static_cast<const uint8_t*>(w);
  for_each_row_block(N, pool, [&](int64_t n0, int64_t n1) {
    std::vector<float> row(static_cast<size_t>(K));  // widening is exact, so converting first changes nothing
    for (int64_t n = n0; n < n1; ++n) {
      convert_row_to_f32_scalar(wtype, wbytes + size_t(n) * row_bytes, row.data(), K);
      for (int64_t t = 0; t < T; ++t) {
        out[t * ldo + n] = dot_reference_order(row.data(), x + t * ldx, K);
      }
    }
  });
}

void matmul_row_tasks(MatmulRows streaming_rows, MatmulRows prefill_rows, int64_t prefill_rows_per_task,
                      int64_t streaming_tokens, DType wtype, const void* w, int64_t N, int64_t K, const float* x,
                      int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool) {
  WEFT_CHECK(matmul_supports(wtype), "matmul: this weight dtype has no kernel");
  if (N <= 0 || T <= 0 || K <= 0) return;
  const size_t row_bytes = dtype_bytes(wtype, size_t(K));
  const auto* wbytes = static_cast<const uint8_t*>(w);
  // A few tokens (batched decode of several sequences, MoE experts with a handful of rows) take
  // the streaming kernels: a task's >= kMatmulDecodeTaskBytes of weights stream from memory once
  // (per token on AVX2, the later tokens from L2), while the prefill kernels would widen them to
  // f32 scratch first. Each output is the same dot product either way.
  const bool streaming = T <= streaming_tokens;
  const int64_t threads = pool != nullptr ? pool->size() : 1;
  int64_t rows_per_task = kMatmulRowsPerTask;
  if (streaming) {
    while (size_t(rows_per_task) * row_bytes < size_t(kMatmulDecodeTaskBytes)) rows_per_task *= 2;
  } else {
    rows_per_task = prefill_rows_per_task > 0 ? prefill_rows_per_task : kMatmulRowsPerTask;
  }
  const int64_t row_tasks = ceil_div(N, rows_per_task);
  // Prefill with fewer row blocks than the pool can use (k/v projections, the router, a shared
  // expert on 16 threads) also splits the tokens, in ranges of whole token blocks; each range
  // widens its rows again, so ranges stay long (kMatmulPrefillMinTokens).
  int64_t token_parts = 1, tokens_per_part = T;
  if (!streaming && threads > 1 && row_tasks < kMatmulPrefillTasksPerThread * threads) {
    const int64_t want = ceil_div(kMatmulPrefillTasksPerThread * threads, row_tasks);
    const int64_t most = std::max<int64_t>(1, T / kMatmulPrefillMinTokens);
    token_parts = std::min(want, most);
    tokens_per_part = ceil_div(ceil_div(T, token_parts), kMatmulPrefillTokenGrain) * kMatmulPrefillTokenGrain;
    token_parts = ceil_div(T, tokens_per_part);
  }
  auto task = [&](int64_t i) {
    const int64_t r = i % row_tasks, part = i / row_tasks;
    const int64_t n0 = r * rows_per_task;
    const int64_t n1 = n0 + rows_per_task < N ? n0 + rows_per_task : N;
    if (streaming) {
      streaming_rows(wtype, wbytes, row_bytes, n0, n1, K, x, ldx, T, out, ldo);
    } else {
      const int64_t t0 = part * tokens_per_part;
      const int64_t tn = std::min(tokens_per_part, T - t0);
      prefill_rows(wtype, wbytes, row_bytes, n0, n1, K, x + t0 * ldx, ldx, tn, out + t0 * ldo, ldo);
    }
  };
  const int64_t n_tasks = row_tasks * token_parts;
  // Tiny products are not worth waking the workers; values do not depend on this choice.
  const bool parallel = threads > 1 && n_tasks > 1 && N * K * T >= 32768;
  if (parallel) {
    // Streaming rows: one contiguous run of weight rows per thread (Schedule::kRanges).
    pool->parallel_for(n_tasks, task, streaming ? Schedule::kRanges : Schedule::kShared);
  } else {
    for (int64_t i = 0; i < n_tasks; ++i) task(i);
  }
}

namespace {
// WEFT_MATMUL_STREAMING_TOKENS, read once: -1 when unset. A value that is not a number in 0..64
// is said on stderr (an A/B of the boundary would otherwise compare a setting with itself) and
// ignored.
int64_t streaming_tokens_override() {
  static const int64_t value = [] {
    const char* s = std::getenv("WEFT_MATMUL_STREAMING_TOKENS");
    if (s == nullptr || *s == '\0') return int64_t(-1);
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 64) return int64_t(v);
    std::fprintf(stderr, "weft: WEFT_MATMUL_STREAMING_TOKENS=%s is not a number of tokens in 0..64; ignored\n", s);
    return int64_t(-1);
  }();
  return value;
}
}  // namespace

bool matmul_few_tokens() {
  static const bool on = [] {
    const char* s = std::getenv("WEFT_MATMUL_FEW_TOKENS");
    if (s == nullptr || *s == '\0' || std::strcmp(s, "1") == 0) return true;
    if (std::strcmp(s, "0") == 0) return false;
    std::fprintf(stderr, "weft: WEFT_MATMUL_FEW_TOKENS=%s is not 0 or 1; ignored\n", s);
    return true;
  }();
  return on;
}

int64_t matmul_streaming_tokens_or(int64_t path_default) {
  (void)matmul_few_tokens();  // both switches are read, and a bad value said, on every SIMD path
  const int64_t o = streaming_tokens_override();
  return o >= 0 ? o : path_default;
}

int64_t matmul_streaming_tokens() {
  return matmul_streaming_tokens_or(use_avx512() ? kMatmulStreamingTokensAvx512 : kMatmulStreamingTokensAvx2);
}

int64_t matmul_prefill_rows_per_task(int64_t K) {
  return use_avx512() ? matmul_avx512_prefill_rows(K) : kMatmulRowsPerTask;
}

void matmul(DType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
            int64_t T, float* out, int64_t ldo, ThreadPool* pool) {
  if (use_avx512()) {
    matmul_avx512(wtype, w, N, K, x, ldx, T, out, ldo, pool);
  } else if (use_avx2()) {
    matmul_avx2(wtype, w, N, K, x, ldx, T, out, ldo, pool);
  } else {
    matmul_scalar(wtype, w, N, K, x, ldx, T, out, ldo, pool);
  }
}

}  // namespace weft
