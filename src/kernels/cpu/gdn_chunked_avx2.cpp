// AVX2/FMA path of the chunked gated delta rule: the register-tiled matrix product, the
// polynomial exp (lane for lane the operations of the scalar twin in gdn_chunked.cpp), an 8x8
// transpose, and the AVX2 instance of the shared chunk driver (gdn_chunked_driver.h). Tiles only
// choose which output elements are computed together; each element is still one fma chain in
// increasing reduction index, so the results are bit-identical to the scalar path.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/gdn_chunked.h"

// No implicit contraction of a multiply and an add into one fma: the scalar twin rounds twice.
#pragma GCC optimize("fp-contract=off", "vect-cost-model=dynamic")
#ifdef __clang__
#pragma clang fp contract(off)  // clang ignores the GCC pragma above and contracts by default
#endif

#include "kernels/cpu/gdn_chunked_driver.h"
#include "kernels/cpu/gdn_chunked_tile.h"

namespace weft {

namespace {

// The vector of this file's tiles (gdn_chunked_tile.h).
struct Ymm {
  using reg = __m256;
  static constexpr int kWidth = 8;
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
};

void gemm_acc_avx2(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t M,
                   int64_t N, int64_t K) {
  if (M <= 0 || N <= 0) return;
  int64_t c_vec = 0;  // columns [0, c_vec) go through vector tiles
  if (M == 1) {
    // One row (the forward substitution): 8 independent chains hide the fma latency.
    for (; c_vec + 64 <= N; c_vec += 64) gemm_tile<Ymm, 1, 8>(C + c_vec, ldc, A, lda, B + c_vec, ldb, K);
    for (; c_vec + 16 <= N; c_vec += 16) gemm_tile<Ymm, 1, 2>(C + c_vec, ldc, A, lda, B + c_vec, ldb, K);
    for (; c_vec + 8 <= N; c_vec += 8) gemm_tile<Ymm, 1, 1>(C + c_vec, ldc, A, lda, B + c_vec, ldb, K);
  } else {
    for (int64_t i0 = 0; i0 < M; i0 += 6) {
      const int rb = int(M - i0 < 6 ? M - i0 : 6);
      float* Ci = C + i0 * ldc;
      const float* Ai = A + i0 * lda;
      int64_t c = 0;
      for (; c + 16 <= N; c += 16) gemm_tile_rows<Ymm, 2>(rb, Ci + c, ldc, Ai, lda, B + c, ldb, K);
      for (; c + 8 <= N; c += 8) gemm_tile_rows<Ymm, 1>(rb, Ci + c, ldc, Ai, lda, B + c, ldb, K);
      c_vec = c;
    }
  }
  // Columns that do not fill a vector: the same chain, one element at a time.
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t c = c_vec; c < N; ++c) {
      float acc = C[i * ldc + c];
      for (int64_t kk = 0; kk < K; ++kk) acc = std::fma(A[i * lda + kk], B[kk * ldb + c], acc);
      C[i * ldc + c] = acc;
    }
  }
}

// Lane for lane exp_fixed of gdn_chunked.cpp.
inline __m256 exp8(__m256 x) {
  const __m256 xc = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), xc);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 z = _mm256_mul_ps(r, r);
  __m256 y = _mm256_fmadd_ps(p, z, r);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
  // Below -87 (and -inf): 0. NaN: the input.
  y = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ), y);
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

void exp_n_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float in[8] = {0, 0, 0, 0, 0, 0, 0, 0}, res[8];
    std::memcpy(in, x + i, size_t(n - i) * sizeof(float));
    _mm256_storeu_ps(res, exp8(_mm256_loadu_ps(in)));
    std::memcpy(y + i, res, size_t(n - i) * sizeof(float));
  }
}

// 8x8 blocks through registers; the edges one element at a time.
void transpose_avx2(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols) {
  const int64_t r8 = rows & ~int64_t(7), c8 = cols & ~int64_t(7);
  for (int64_t r0 = 0; r0 < r8; r0 += 8) {
    for (int64_t c0 = 0; c0 < c8; c0 += 8) {
      __m256 x[8], t[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) x[i] = _mm256_loadu_ps(src + (r0 + i) * lds + c0);
#pragma GCC unroll 4
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(x[i], x[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
      }
#pragma GCC unroll 2
      for (int h = 0; h < 8; h += 4) {
        x[h + 0] = _mm256_shuffle_ps(t[h + 0], t[h + 2], 0x44);
        x[h + 1] = _mm256_shuffle_ps(t[h + 0], t[h + 2], 0xEE);
        x[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        x[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
      }
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(dst + (c0 + i) * ldd + r0, _mm256_permute2f128_ps(x[i], x[i + 4], 0x20));
        _mm256_storeu_ps(dst + (c0 + i + 4) * ldd + r0, _mm256_permute2f128_ps(x[i], x[i + 4], 0x31));
      }
    }
    for (int64_t r = r0; r < r0 + 8; ++r)
      for (int64_t c = c8; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
  for (int64_t r = r8; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

const GdnChunkedOps kAvx2Ops = {gemm_acc_avx2, exp_n_avx2, transpose_avx2};

struct Avx2Ops {
  static void gemm_acc(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t M,
                       int64_t N, int64_t K) {
    gemm_acc_avx2(C, ldc, A, lda, B, ldb, M, N, K);
  }
  static void exp_n(const float* x, float* y, int64_t n) { exp_n_avx2(x, y, n); }
  static void transpose(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols) {
    transpose_avx2(src, lds, dst, ldd, rows, cols);
  }
};

}  // namespace

const GdnChunkedOps& gdn_chunked_ops_avx2() { return kAvx2Ops; }

void gdn_chunked_avx2(const GdnRecurrentArgs& a, ThreadPool* pool) { gdn_chunked_run<Avx2Ops>(a, pool); }

}  // namespace weft
