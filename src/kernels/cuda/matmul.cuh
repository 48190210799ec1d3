// Dense matrix products on the GPU: y[T, N] = x[T, K] · wᵀ for a weight w [N, K] in its stored
// type (f32, f16, bf16), our own kernel for every T (decode and prefill alike).
//
// Reduction order (strict tier): each output y[t, n] is the dot product of one weight row and one
// activation row computed by one warp: lane l accumulates, with fmaf in increasing k, the
// elements k whose 8-element group (k / 8) is ≡ l (mod 32); the 32 lane sums are then added by the
// butterfly xor 16, 8, 4, 2, 1 and lane 0's value is stored. Nothing in that order depends on T,
// on which other rows are in the batch or on the grid, so a sequence's results are batch- and
// split-invariant, and run to run identical. A warp computes 4 weight rows x 8 tokens at once
// (each weight load serves 8 tokens, each activation load 4 rows). One token (T = 1, decode) takes
// a kernel of one or two weight rows per warp with the same per-element order (more blocks, a
// whole row's loads in flight; WEFT_CUDA_MATVEC_ROWS=1|2, default 2).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace weft::cuda {

// True when the 16-byte load path applies (it gives the same bits as the scalar path).
bool matmul_vec_ok(const void* w, size_t row_bytes, int64_t K, const float* x, int64_t ldx);
// One projection of the routed experts, grouped by the device-side routing (moe_route.cuh): the
// sorted rows [begin[e], begin[e+1]) of x (ldx floats apart) times w[e] into the same rows of y.
struct ExpertMatmulJob {
  const void* const* w = nullptr;  // [E] device weights per expert; null: not this launch's type
  size_t row_bytes = 0;
  int64_t N = 0, K = 0;
  const float* x = nullptr;
  int64_t ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  // Set: the input is swiglu(x, up) (up in x's layout), computed while loading (one-row path).
  const float* up = nullptr;
};
// The projections `jobs` (device array) over the token tiles of a routing: grid (N tiles,
// max_tiles, n_jobs); blocks past *n_tiles return at once, so the host needs no routing result.
// Each output element gets exactly `matmul`'s per-element order (same bits as one matmul per
// expert). vec: matmul_vec_ok holds for every expert's weights and for x + any row. one_row: the
// routing has one row (decode), so every expert holds at most one: the one-token kernel serves.
// swiglu_k > 0: the jobs' inputs are swiglu(x, up), swiglu_k the largest K of the jobs (vec and
// one_row only; same bits as swiglu first).
void expert_matmul(DType dtype, const ExpertMatmulJob* jobs, int64_t n_jobs, int64_t max_N,
                   const int32_t* expert_begin, const int32_t* tile_expert, const int32_t* tile_t0,
                   const int32_t* n_tiles, int64_t max_tiles, bool vec, bool one_row, int64_t swiglu_k,
                   cudaStream_t stream);

// Several one-token products of the same input row x (q/k/v, the GDN input projections, a gate
// and an up projection) in one launch; each output element gets `matmul`'s order, so the bits are
// those of one matmul call per product. All weights of one type, each matmul_vec_ok with x.
constexpr int kMaxMatvecJobs = 8;
struct MatvecJobs {
  int n = 0;
  const void* w[kMaxMatvecJobs] = {};
  size_t row_bytes[kMaxMatvecJobs] = {};
  int64_t N[kMaxMatvecJobs] = {};
  float* y[kMaxMatvecJobs] = {};
};
// up set: the input is swiglu(x, up) computed while loading (same bits as swiglu, then the product).
void matvec_multi(DType dtype, const MatvecJobs& jobs, int64_t K, const float* x, cudaStream_t stream,
                  const float* up = nullptr);

// True for the weight types this kernel takes.
bool matmul_supports(DType dtype);
// w: [N, K] rows of row_bytes bytes (device); x: T rows, ldx floats apart; y: T rows, ldy apart.
void matmul(DType dtype, const void* w, size_t row_bytes, int64_t N, int64_t K, const float* x, int64_t ldx,
            int64_t T, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace weft::cuda
