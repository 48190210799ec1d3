// Chunked gated delta rule: the scalar twin of its primitives (matrix product with a fixed fma
// chain, polynomial exp, transpose), the scalar instance of the shared chunk driver
// (gdn_chunked_driver.h) and the dispatch.
// The order every value is computed in is the contract of gdn_chunked.h.
#include "kernels/cpu/gdn_chunked.h"

#include <cmath>
#include <cstring>

#include "core/cpu_features.h"
#include "core/thread_pool.h"

// The AVX2 twin uses explicit fma only; a multiply followed by an add must stay two roundings in
// both files, so no contraction here either (it matters only if this file is built with FMA).
#pragma GCC optimize("fp-contract=off", "vect-cost-model=dynamic")
#ifdef __clang__
#pragma clang fp contract(off)  // clang ignores the GCC pragma above and contracts by default
#endif

#include "kernels/cpu/gdn_chunked_driver.h"

namespace weft {

namespace {

// exp(x) by Cephes' expf polynomial (|rel err| ~ 1 ulp on [-87, 88]): x = n·ln2 + r with
// n = nearest integer of x·log2(e), e^r by a degree-7 polynomial, times 2^n. 0 below -87 (the
// result would be subnormal), x clamped to 88 above, NaN passes through.
// gdn_chunked_avx2.cpp computes the same operations lane by lane.
float exp_fixed(float x) {
  if (x != x) return x;
  if (x < -87.0f) return 0.0f;
  const float xc = x < 88.0f ? x : 88.0f;
  const float n = std::nearbyint(xc * 1.44269504088896341f);
  float r = std::fma(n, -0.693359375f, xc);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float z = r * r;
  float y = std::fma(p, z, r);
  y = y + 1.0f;
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

void exp_n_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_fixed(x[i]);
}

void gemm_acc_scalar(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb,
                     int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t c = 0; c < N; ++c) {
      float acc = C[i * ldc + c];
      for (int64_t kk = 0; kk < K; ++kk) acc = std::fma(A[i * lda + kk], B[kk * ldb + c], acc);
      C[i * ldc + c] = acc;
    }
  }
}

void transpose_scalar(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

struct ScalarOps {
  static void gemm_acc(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t M,
                       int64_t N, int64_t K) {
    gemm_acc_scalar(C, ldc, A, lda, B, ldb, M, N, K);
  }
  static void exp_n(const float* x, float* y, int64_t n) { exp_n_scalar(x, y, n); }
  static void transpose(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols) {
    transpose_scalar(src, lds, dst, ldd, rows, cols);
  }
};

const GdnChunkedOps kScalarOps = {gemm_acc_scalar, exp_n_scalar, transpose_scalar};

}  // namespace

const GdnChunkedOps& gdn_chunked_ops_scalar() { return kScalarOps; }

void gdn_chunked_scalar(const GdnRecurrentArgs& a, ThreadPool* pool) { gdn_chunked_run<ScalarOps>(a, pool); }

void gdn_chunked(const GdnRecurrentArgs& a, ThreadPool* pool) {
  if (use_avx512()) gdn_chunked_avx512(a, pool);
  else if (use_avx2()) gdn_chunked_avx2(a, pool);
  else gdn_chunked_scalar(a, pool);
}

}  // namespace weft
