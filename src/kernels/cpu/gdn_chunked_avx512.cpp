// AVX-512 path of the chunked gated delta rule: the matrix product with zmm register tiles, and
// the AVX-512 instance of the shared chunk driver (gdn_chunked_driver.h). The exp and the
// transpose are the AVX2 ones (gdn_chunked_ops_avx2()): they are a small part of a chunk's time.
// Tiles only choose which output elements are computed together; each element is still one fma
// chain in increasing reduction index (gdn_chunked.h), so the results are bit-identical to the
// AVX2 and scalar paths.
//
// Tiles of the product (C += A·B, row-major):
//   M > 1: slabs of 6 rows; columns by 6 x 4 zmm (64 columns: 24 accumulators + 4 B registers +
//          1 broadcast of the 32 zmm), then 6 x 2 and 6 x 1 zmm;
//   M = 1 (the forward substitution, one row against the δ rows above it): 1 x 8 zmm (128
//          columns: 8 independent chains hide the fma latency), then 1 x 4, 1 x 2, 1 x 1;
//   the last N % 16 columns go to the AVX2 product (a ymm tile of 8, then one element at a time).
#include <immintrin.h>

#include <cstdint>

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
struct Zmm {
  using reg = __m512;
  static constexpr int kWidth = 16;
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
};

void gemm_acc_avx512(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t M,
                     int64_t N, int64_t K) {
  if (M <= 0 || N <= 0) return;
  int64_t c_vec = 0;  // columns [0, c_vec) go through zmm tiles
  if (M == 1) {
    for (; c_vec + 128 <= N; c_vec += 128) gemm_tile<Zmm, 1, 8>(C + c_vec, ldc, A, lda, B + c_vec, ldb, K);
    for (; c_vec + 64 <= N; c_vec += 64) gemm_tile<Zmm, 1, 4>(C + c_vec, ldc, A, lda, B + c_vec, ldb, K);
    for (; c_vec + 32 <= N; c_vec += 32) gemm_tile<Zmm, 1, 2>(C + c_vec, ldc, A, lda, B + c_vec, ldb, K);
    for (; c_vec + 16 <= N; c_vec += 16) gemm_tile<Zmm, 1, 1>(C + c_vec, ldc, A, lda, B + c_vec, ldb, K);
  } else {
    for (int64_t i0 = 0; i0 < M; i0 += 6) {
      const int rb = int(M - i0 < 6 ? M - i0 : 6);
      float* Ci = C + i0 * ldc;
      const float* Ai = A + i0 * lda;
      int64_t c = 0;
      for (; c + 64 <= N; c += 64) gemm_tile_rows<Zmm, 4>(rb, Ci + c, ldc, Ai, lda, B + c, ldb, K);
      for (; c + 32 <= N; c += 32) gemm_tile_rows<Zmm, 2>(rb, Ci + c, ldc, Ai, lda, B + c, ldb, K);
      for (; c + 16 <= N; c += 16) gemm_tile_rows<Zmm, 1>(rb, Ci + c, ldc, Ai, lda, B + c, ldb, K);
      c_vec = c;
    }
  }
  // Fewer than 16 columns left: the AVX2 product (an 8-column ymm tile, then one element at a
  // time; the same chains).
  if (c_vec < N) gdn_chunked_ops_avx2().gemm_acc(C + c_vec, ldc, A, lda, B + c_vec, ldb, M, N - c_vec, K);
}

struct Avx512Ops {
  static void gemm_acc(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t M,
                       int64_t N, int64_t K) {
    gemm_acc_avx512(C, ldc, A, lda, B, ldb, M, N, K);
  }
  static void exp_n(const float* x, float* y, int64_t n) { gdn_chunked_ops_avx2().exp_n(x, y, n); }
  static void transpose(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols) {
    gdn_chunked_ops_avx2().transpose(src, lds, dst, ldd, rows, cols);
  }
};

}  // namespace

const GdnChunkedOps& gdn_chunked_ops_avx512() {
  // Built on first use (not at static initialisation): it reads the AVX2 table of another file.
  static const GdnChunkedOps ops = {gemm_acc_avx512, gdn_chunked_ops_avx2().exp_n, gdn_chunked_ops_avx2().transpose};
  return ops;
}

void gdn_chunked_avx512(const GdnRecurrentArgs& a, ThreadPool* pool) { gdn_chunked_run<Avx512Ops>(a, pool); }

}  // namespace weft
