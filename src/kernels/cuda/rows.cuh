// Row-wise kernels of the forward pass on the GPU: embedding, row gathers, norms, element-wise
// activations and the Hadamard rotation. Every pointer is device memory. Reductions (the norms'
// sum of squares, in double as on the CPU) use block_sum's fixed order over one block per row, so
// a row's result depends only on that row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace weft::cuda {

// x[i] = row ids[i] of table (f32, f16 or bf16 rows of `cols` values, row_bytes apart), as f32.
void embed(DType dtype, const void* table, size_t row_bytes, int64_t cols, const int32_t* ids, int64_t n, float* x,
           cudaStream_t stream);
// dst[i] = src[rows[i]], n rows of width floats.
void gather_rows(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst, cudaStream_t stream);
// y[r] = x[r] · rsqrt(mean(x[r]²) + eps) · (plus_one ? 1 + w : w); y may alias x.
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps, bool plus_one,
             cudaStream_t stream);
// y[r] = w · (x[r] · rsqrt(mean(x[r]²) + eps)) · silu(z[r]); y may alias x.
void rmsnorm_gated(const float* x, const float* z, const float* w, float* y, int64_t rows, int64_t n, float eps,
                   cudaStream_t stream);
void add(float* x, const float* y, int64_t n, cudaStream_t stream);                       // x += y
void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);  // silu(g)·u
void mul_sigmoid(float* x, const float* gate, int64_t n, cudaStream_t stream);             // x *= σ(gate)
// y[r] += σ(s[r]) · x[r]
void add_sigmoid_scaled(float* y, const float* x, const float* s, int64_t rows, int64_t width, cudaStream_t stream);
// The end of a layer in one launch (decode: one kernel instead of three): for each of `rows` rows
// of n floats, when `shared` is set y[r] += σ(s[r])·shared[r] (add_sigmoid_scaled); then
// x[r] += y[r] (add); then, when `xn` is set, xn[r] = rmsnorm(x[r], w) (rmsnorm). Same bits as
// those three kernels in sequence; xn may alias y.
struct ResidualArgs {
  float* x = nullptr;
  float* y = nullptr;
  const float* shared = nullptr;
  const float* s = nullptr;
  const float* w = nullptr;
  float* xn = nullptr;
  int64_t rows = 0, n = 0;
  float eps = 0.0f;
  bool plus_one = false;
};
void residual_rmsnorm(const ResidualArgs& a, cudaStream_t stream);
// x[r] <- H x[r] / sqrt(n) (n a power of two, <= 8192): the CPU's butterflies, bit for bit.
void hadamard_rows(float* x, int64_t rows, int64_t n, cudaStream_t stream);

}  // namespace weft::cuda
