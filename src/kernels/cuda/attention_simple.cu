// The reference attention kernel of the CUDA backend: one block per (query row, head), keys in
// position order with an online softmax in f32. Handles every KV type and page size; the split
// kernel (attention_split.cu) is the fast path. Deterministic: fixed reduction trees, and a row's
// result depends only on its own keys (so verify rows equal decode rows bit for bit).
#include <cfloat>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_kernels.cuh"

namespace weft::cuda::detail {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxPerThread = 4;  // head_dim <= 512

struct SimpleArgs {
  const uint8_t* const* pages;
  int64_t page_tokens, n_kv, hd, pos0, n_heads, group;
  size_t k_row_bytes, v_row_bytes;
  int k_type, v_type;
  float scale;
  const float* q;
  float* out;
};

// Sum over the block in a fixed order: butterfly inside each warp, then warps in index order.
__device__ float block_sum(float x, float* red) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `red` is free (the previous call's readers are done)
  if (lane == 0) red[warp] = x;
  __syncthreads();
  float s = red[0];
  for (int w = 1; w < kThreads / 32; ++w) s += red[w];
  return s;
}

__global__ void __launch_bounds__(kThreads) simple_kernel(SimpleArgs a) {
  __shared__ float red[kThreads / 32];
  const int64_t t = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads, g = h / a.group;
  const int64_t n_keys = a.pos0 + t + 1;
  const float* q = a.q + (t * a.n_heads + h) * a.hd;
  float qr[kMaxPerThread], acc[kMaxPerThread];
  for (int j = 0; j < kMaxPerThread; ++j) {
    const int64_t d = threadIdx.x + j * kThreads;
    qr[j] = d < a.hd ? q[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t pos = 0; pos < n_keys; ++pos) {
    const uint8_t* kr = kv_row_ptr(a.pages, a.page_tokens, a.n_kv, a.k_row_bytes, a.k_row_bytes, false, g, pos);
    float part = 0.0f;
    for (int j = 0; j < kMaxPerThread; ++j) {
      const int64_t d = threadIdx.x + j * kThreads;
      if (d < a.hd) part = fmaf(qr[j], kv_load(a.k_type, kr, d), part);
    }
    const float s = __fmul_rn(block_sum(part, red), a.scale);
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new), p = expf(s - m_new);
    l = __fadd_rn(__fmul_rn(l, alpha), p);
    const uint8_t* vr = kv_row_ptr(a.pages, a.page_tokens, a.n_kv, a.k_row_bytes, a.v_row_bytes, true, g, pos);
    for (int j = 0; j < kMaxPerThread; ++j) {
      const int64_t d = threadIdx.x + j * kThreads;
      if (d < a.hd) acc[j] = fmaf(p, kv_load(a.v_type, vr, d), __fmul_rn(acc[j], alpha));
    }
    m = m_new;
  }
  const float inv = 1.0f / l;
  float* out = a.out + (t * a.n_heads + h) * a.hd;
  for (int j = 0; j < kMaxPerThread; ++j) {
    const int64_t d = threadIdx.x + j * kThreads;
    if (d < a.hd) out[d] = acc[j] * inv;
  }
}

}  // namespace

bool simple_supports(const AttentionCall& c) {
  return c.kv.head_dim <= kThreads * kMaxPerThread && kv_type_of(c.kv.k_type) != kKvOther &&
         kv_type_of(c.kv.v_type) != kKvOther;
}

void attention_simple(const AttentionCall& c, cudaStream_t stream) {
  const KvLayerView& kv = c.kv;
  const AttentionArgs& x = c.args;
  SimpleArgs a{kv.pages, kv.page_tokens, kv.n_kv_heads, kv.head_dim, x.pos0, x.n_heads, x.n_heads / kv.n_kv_heads,
               kv.k_row_bytes, kv.v_row_bytes, int(kv_type_of(kv.k_type)), int(kv_type_of(kv.v_type)), x.scale,
               x.q, x.out};
  simple_kernel<<<unsigned(x.T * x.n_heads), kThreads, 0, stream>>>(a);
  check(cudaGetLastError(), "attention (simple) launch");
}

}  // namespace weft::cuda::detail
