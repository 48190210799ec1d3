// Dense matrix products on the GPU: y[T, N] = x[T, K] · wᵀ for a weight w [N, K] in its stored
// type (f32, f16, bf16), our own kernel for every T (decode and prefill alike).
//
// Reduction order (strict tier): each output y[t, n] is the dot product of one weight row and one
// activation row computed by one warp: lane l accumulates, with fmaf in increasing k, the
// elements k whose 8-element group (k / 8) is ≡ l (mod 32); the 32 lane sums are then added by the
// butterfly xor 16, 8, 4, 2, 1 and lane 0's value is stored. Nothing in that order depends on T,
// on which other rows are in the batch or on the grid, so a sequence's results are batch- and
// split-invariant, and run to run identical. A warp computes 4 weight rows x 8 tokens at once
// (each weight load serves 8 tokens, each activation load 4 rows).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace weft::cuda {

// One product of a grouped launch (all pointers device memory).
struct MatmulGroup {
  const void* w = nullptr;
  size_t row_bytes = 0;
  int64_t N = 0, K = 0;
  const float* x = nullptr;
  int64_t ldx = 0, T = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// True when the 16-byte load path applies (it gives the same bits as the scalar path).
bool matmul_vec_ok(const void* w, size_t row_bytes, int64_t K, const float* x, int64_t ldx);
// Several products of one weight type in one launch (the MoE experts of a layer): `groups` is a
// device array; max_N / max_T bound the groups' N and T; vec: matmul_vec_ok holds for every group.
// Each output element gets exactly the per-element order of `matmul`, so the bits are those of
// one matmul call per group.
void grouped_matmul(DType dtype, const MatmulGroup* groups, int64_t n_groups, int64_t max_N, int64_t max_T, bool vec,
                    cudaStream_t stream);

// True for the weight types this kernel takes.
bool matmul_supports(DType dtype);
// w: [N, K] rows of row_bytes bytes (device); x: T rows, ldx floats apart; y: T rows, ldy apart.
void matmul(DType dtype, const void* w, size_t row_bytes, int64_t N, int64_t K, const float* x, int64_t ldx,
            int64_t T, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace weft::cuda
