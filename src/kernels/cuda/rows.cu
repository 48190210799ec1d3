#include "kernels/cuda/rows.cuh"

#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/weight_types.cuh"

namespace weft::cuda {
namespace {

constexpr int kRowThreads = 256;

// Block size of the row norms (rmsnorm and its fused twin, which must agree: the sum of squares'
// order depends on it): a few elements per thread, so a decode row (one block) is not a chain of
// dependent load rounds on one SM. Depends on n only (never on the number of rows).
unsigned norm_threads(int64_t n) { return n >= 2048 ? 1024u : n >= 1024 ? 512u : unsigned(kRowThreads); }

template <DType D>
__global__ void embed_kernel(const uint8_t* table, size_t row_bytes, int64_t cols, const int32_t* ids, float* x) {
  pdl_begin_early();
  const int64_t t = blockIdx.x;
  const uint8_t* row = table + size_t(ids[t]) * row_bytes;
  float* out = x + t * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) out[i] = weight_at<D>(row, cols, i);
}

__global__ void gather_kernel(const float* src, const int32_t* rows, int64_t width, float* dst) {
  pdl_begin_early();
  const int64_t i = blockIdx.x;
  const float* s = src + int64_t(rows[i]) * width;
  for (int64_t h = threadIdx.x; h < width; h += blockDim.x) dst[i * width + h] = s[h];
}

__device__ float inv_rms(const float* x, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += double(x[i]) * double(x[i]);
  ss = block_sum(ss);
  return float(1.0 / sqrt(ss / double(n) + double(eps)));
}

__global__ void rmsnorm_kernel(const float* x, const float* w, float* y, int64_t n, float eps, bool plus_one) {
  pdl_begin_early();
  const float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = y + int64_t(blockIdx.x) * n;
  const float inv = inv_rms(xr, n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * (plus_one ? 1.0f + w[i] : w[i]);
}

__global__ void rmsnorm_gated_kernel(const float* x, const float* z, const float* w, float* y, int64_t n, float eps) {
  pdl_begin_early();
  const int64_t off = int64_t(blockIdx.x) * n;
  const float inv = inv_rms(x + off, n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[off + i] = w[i] * (x[off + i] * inv) * silu_dev(z[off + i]);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  pdl_begin_early();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void swiglu_kernel(const float* g, const float* u, float* out, int64_t n) {
  pdl_begin_early();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = swiglu_dev(g[i], u[i]);
}

__global__ void mul_sigmoid_kernel(float* x, const float* g, int64_t n) {
  pdl_begin_early();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= sigmoid_dev(g[i]);
}

__global__ void add_sigmoid_scaled_kernel(float* y, const float* x, const float* s, int64_t width) {
  pdl_begin_early();
  const int64_t r = blockIdx.x;
  const float g = sigmoid_dev(s[r]);
  for (int64_t h = threadIdx.x; h < width; h += blockDim.x) y[r * width + h] = gated_add_dev(y[r * width + h], g, x[r * width + h]);
}

// The residual chain of a layer's end in one pass per row: [y[r] += σ(s[r])·sh[r]] (PRE, the
// shared expert), x[r] += y[r], [xn[r] = rmsnorm(x[r])] (NORM, the next layer's input norm).
// Each element gets exactly the separate kernels' arithmetic (the same helpers, the same
// inv_rms over the same block size), so the bits are those of add_sigmoid_scaled + add + rmsnorm;
// a thread reads back only the x values it wrote itself before the reduction's barrier.
template <bool PRE, bool NORM>
__global__ void residual_kernel(float* x, float* y, const float* sh, const float* s, const float* w, float* xn,
                                int64_t n, float eps, bool plus_one) {
  pdl_begin_early();
  const int64_t off = int64_t(blockIdx.x) * n;
  float g = 0.0f;
  if constexpr (PRE) g = sigmoid_dev(s[blockIdx.x]);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float yv = y[off + i];
    if constexpr (PRE) {
      yv = gated_add_dev(yv, g, sh[off + i]);
      y[off + i] = yv;
    }
    x[off + i] += yv;
  }
  if constexpr (NORM) {
    const float inv = inv_rms(x + off, n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      xn[off + i] = x[off + i] * inv * (plus_one ? 1.0f + w[i] : w[i]);
  }
}

// One row per block in shared memory; stage h pairs (j, j + h) exactly as kernels/cpu/hadamard.cpp.
__global__ void hadamard_kernel(float* x, int64_t n, float scale) {
  pdl_begin_early();
  extern __shared__ float buf[];
  float* row = x + int64_t(blockIdx.x) * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) buf[i] = row[i];
  __syncthreads();
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t p = threadIdx.x; p < n / 2; p += blockDim.x) {
      const int64_t j = (p / h) * 2 * h + p % h;
      const float a = buf[j], b = buf[j + h];
      buf[j] = a + b;
      buf[j + h] = a - b;
    }
    __syncthreads();
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) row[i] = buf[i] * scale;
}

}  // namespace

void embed(DType dtype, const void* table, size_t row_bytes, int64_t cols, const int32_t* ids, int64_t n, float* x,
           cudaStream_t stream) {
  if (n == 0) return;
  const uint8_t* t = static_cast<const uint8_t*>(table);
  with_weight_type(dtype, "embed", [&](auto d) {
    launch_pdl(embed_kernel<decltype(d)::value>, unsigned(n), kRowThreads, 0, stream, t, row_bytes, cols, ids, x);
  });
  WEFT_CUDA_LAUNCHED();
}

void gather_rows(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst, cudaStream_t stream) {
  if (n == 0) return;
  launch_pdl(gather_kernel, unsigned(n), kRowThreads, 0, stream, src, rows, width, dst);
  WEFT_CUDA_LAUNCHED();
}

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps, bool plus_one,
             cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(rmsnorm_kernel, unsigned(rows), norm_threads(n), 0, stream, x, w, y, n, eps, plus_one);
  WEFT_CUDA_LAUNCHED();
}

void rmsnorm_gated(const float* x, const float* z, const float* w, float* y, int64_t rows, int64_t n, float eps,
                   cudaStream_t stream) {
  if (rows == 0) return;
  // Value heads are short (128): a smaller block keeps the threads busy.
  launch_pdl(rmsnorm_gated_kernel, unsigned(rows), n <= 128 ? 128 : kRowThreads, 0, stream, x, z, w, y, n, eps);
  WEFT_CUDA_LAUNCHED();
}

void add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_pdl(add_kernel, blocks_for(n, kRowThreads), kRowThreads, 0, stream, x, y, n);
  WEFT_CUDA_LAUNCHED();
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_pdl(swiglu_kernel, blocks_for(n, kRowThreads), kRowThreads, 0, stream, gate, up, out, n);
  WEFT_CUDA_LAUNCHED();
}

void mul_sigmoid(float* x, const float* gate, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_pdl(mul_sigmoid_kernel, blocks_for(n, kRowThreads), kRowThreads, 0, stream, x, gate, n);
  WEFT_CUDA_LAUNCHED();
}

void add_sigmoid_scaled(float* y, const float* x, const float* s, int64_t rows, int64_t width, cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(add_sigmoid_scaled_kernel, unsigned(rows), kRowThreads, 0, stream, y, x, s, width);
  WEFT_CUDA_LAUNCHED();
}

void residual_rmsnorm(const ResidualArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const bool pre = a.shared != nullptr, norm = a.xn != nullptr;
  const unsigned g = unsigned(a.rows);
#define WEFT_RESIDUAL(P, N) \
  launch_pdl(residual_kernel<P, N>, g, norm_threads(a.n), 0, stream, a.x, a.y, a.shared, a.s, a.w, a.xn, a.n, a.eps, a.plus_one)
  if (pre && norm) WEFT_RESIDUAL(true, true);
  else if (pre) WEFT_RESIDUAL(true, false);
  else if (norm) WEFT_RESIDUAL(false, true);
  else WEFT_RESIDUAL(false, false);
#undef WEFT_RESIDUAL
  WEFT_CUDA_LAUNCHED();
}

void hadamard_rows(float* x, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows == 0) return;
  const float scale = float(1.0 / std::sqrt(double(n)));
  launch_pdl(hadamard_kernel, unsigned(rows), 128, size_t(n) * sizeof(float), stream, x, n, scale);
  WEFT_CUDA_LAUNCHED();
}

}  // namespace weft::cuda
