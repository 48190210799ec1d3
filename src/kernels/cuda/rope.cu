#include "kernels/cuda/rope.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rows.cuh"

namespace weft::cuda {
namespace {

__global__ void rope_tables_kernel(const int64_t* positions, int64_t rows, const float* inv_freq, int64_t half,
                                   float* cs, float* sn) {
  pdl_begin_early();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * half) return;
  const int64_t t = idx / half, i = idx % half;
  const float angle = __fmul_rn(float(positions[t]), inv_freq[i]);
  cs[idx] = float(cos(double(angle)));
  sn[idx] = float(sin(double(angle)));
}

// Block (t, h): h < n_heads is query head h, else KV head h - n_heads. hd values in shared memory.
__global__ void attention_prep_kernel(AttentionPrepArgs a) {
  pdl_begin_early();
  extern __shared__ float head[];
  const int64_t t = blockIdx.x, h = blockIdx.y, nh = a.n_heads, nkv = a.n_kv, hd = a.head_dim;
  const int64_t half = a.rotary_dim / 2;
  const bool is_q = h < nh;
  const float* norm_w = is_q ? a.q_norm : a.k_norm;
  float* dst;
  if (is_q) {
    const int64_t q_rows = nh * hd * (a.gated ? 2 : 1);
    const int64_t off = h * hd * (a.gated ? 2 : 1);
    const float* src = a.qg + t * q_rows + off;
    dst = a.q + (t * nh + h) * hd;
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
      head[i] = a.q_bias ? src[i] + a.q_bias[off + i] : src[i];
      if (a.gated) a.gate[(t * nh + h) * hd + i] = a.q_bias ? src[hd + i] + a.q_bias[off + hd + i] : src[hd + i];
    }
  } else {
    const int64_t kh = h - nh;
    dst = a.k + (t * nkv + kh) * hd;
    float* v = a.v + (t * nkv + kh) * hd;
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
      head[i] = a.k_bias ? dst[i] + a.k_bias[kh * hd + i] : dst[i];
      if (a.v_bias) v[i] += a.v_bias[kh * hd + i];
    }
  }
  __syncthreads();
  if (norm_w) {
    double ss = 0;
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) ss += double(head[i]) * double(head[i]);
    ss = block_sum(ss);
    const float inv = float(1.0 / sqrt(ss / double(hd) + double(a.eps)));
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x)
      head[i] = head[i] * inv * (a.norm_plus_one ? 1.0f + norm_w[i] : norm_w[i]);
    __syncthreads();
  }
  const float* cs = a.cos + t * half;
  const float* sn = a.sin + t * half;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    float out = head[i];
    if (i < half) out = __fsub_rn(__fmul_rn(head[i], cs[i]), __fmul_rn(head[i + half], sn[i]));
    else if (i < 2 * half) out = __fadd_rn(__fmul_rn(head[i], cs[i - half]), __fmul_rn(head[i - half], sn[i - half]));
    dst[i] = out;
  }
}

}  // namespace

void rope_tables(const int64_t* positions, int64_t rows, const float* inv_freq, int64_t half, float* cos, float* sin,
                 cudaStream_t stream) {
  if (rows * half == 0) return;
  launch_pdl(rope_tables_kernel, blocks_for(rows * half, 256), 256, 0, stream, positions, rows, inv_freq, half, cos, sin);
  WEFT_CUDA_LAUNCHED();
}

void attention_prep(const AttentionPrepArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const dim3 grid(unsigned(a.rows), unsigned(a.n_heads + a.n_kv));
  launch_pdl(attention_prep_kernel, grid, 128, size_t(a.head_dim) * sizeof(float), stream, a);
  WEFT_CUDA_LAUNCHED();
  // --kv-rotate: H·q and H·k (scores unchanged), H·v; after norm and RoPE, as on the CPU.
  if (a.rotate_k) {
    hadamard_rows(a.q, a.rows * a.n_heads, a.head_dim, stream);
    hadamard_rows(a.k, a.rows * a.n_kv, a.head_dim, stream);
  }
  if (a.rotate_v) hadamard_rows(a.v, a.rows * a.n_kv, a.head_dim, stream);
}

}  // namespace weft::cuda
