// The register tile of the chunked GDN's matrix product, shared by the AVX2 and AVX-512 paths
// (gdn_chunked_avx2.cpp, gdn_chunked_avx512.cpp, each after its fp-contract pragma): RB rows x CB
// vectors of columns of C accumulated over K, acc = fma(A[i][kk], B[kk][c], acc) in increasing kk.
// Tiles only choose which elements are computed together, so every width gives the contract's
// bits (gdn_chunked.h). V is the file's vector: type `reg`, `kWidth` floats, and static load,
// store, broadcast and fma.
// Internal linkage only (anonymous namespace): the copies are compiled with different flags.
#pragma once

#include <cstdint>

namespace weft {
namespace {

template <class V, int RB, int CB>
inline void gemm_tile(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t K) {
  typename V::reg acc[RB][CB];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int cb = 0; cb < CB; ++cb) acc[i][cb] = V::load(C + i * ldc + V::kWidth * cb);
  for (int64_t kk = 0; kk < K; ++kk) {
    typename V::reg b[CB];
#pragma GCC unroll 8
    for (int cb = 0; cb < CB; ++cb) b[cb] = V::load(B + kk * ldb + V::kWidth * cb);
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      const typename V::reg av = V::broadcast(A + i * lda + kk);
#pragma GCC unroll 8
      for (int cb = 0; cb < CB; ++cb) acc[i][cb] = V::fma(av, b[cb], acc[i][cb]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int cb = 0; cb < CB; ++cb) V::store(C + i * ldc + V::kWidth * cb, acc[i][cb]);
}

// A slab of rb (1..6) rows.
template <class V, int CB>
inline void gemm_tile_rows(int rb, float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb,
                           int64_t K) {
  switch (rb) {
    case 1: gemm_tile<V, 1, CB>(C, ldc, A, lda, B, ldb, K); break;
    case 2: gemm_tile<V, 2, CB>(C, ldc, A, lda, B, ldb, K); break;
    case 3: gemm_tile<V, 3, CB>(C, ldc, A, lda, B, ldb, K); break;
    case 4: gemm_tile<V, 4, CB>(C, ldc, A, lda, B, ldb, K); break;
    case 5: gemm_tile<V, 5, CB>(C, ldc, A, lda, B, ldb, K); break;
    default: gemm_tile<V, 6, CB>(C, ldc, A, lda, B, ldb, K); break;
  }
}

}  // namespace
}  // namespace weft
