#include "kernels/cuda/gdn.cuh"

#include <cmath>
#include <stdexcept>

#include "kernels/cuda/common.cuh"

namespace weft::cuda {
namespace {

// One block per row; thread loops over the per-key-head groups.
__global__ void gdn_unpack_kernel(const float* qkvz, const float* ba, int64_t nk, int64_t nv, int64_t dk, int64_t dv,
                                  float* mixed, float* z, float* b, float* a) {
  pdl_begin_early();
  const int64_t t = blockIdx.x, r = nv / nk, group = 2 * dk + 2 * r * dv;
  const int64_t key_dim = nk * dk, value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim;
  for (int64_t idx = threadIdx.x; idx < nk * group; idx += blockDim.x) {
    const int64_t h = idx / group, i = idx % group;
    const float val = qkvz[t * nk * group + idx];
    if (i < dk) mixed[t * conv_dim + h * dk + i] = val;
    else if (i < 2 * dk) mixed[t * conv_dim + key_dim + h * dk + (i - dk)] = val;
    else if (i < 2 * dk + r * dv) mixed[t * conv_dim + 2 * key_dim + h * r * dv + (i - 2 * dk)] = val;
    else z[t * value_dim + h * r * dv + (i - 2 * dk - r * dv)] = val;
  }
  for (int64_t idx = threadIdx.x; idx < nv; idx += blockDim.x) {
    const int64_t h = idx / r, i = idx % r;
    b[t * nv + idx] = ba[t * 2 * nv + h * 2 * r + i];
    a[t * nv + idx] = ba[t * 2 * nv + h * 2 * r + r + i];
  }
}

constexpr int kMaxConvKernel = 8;

// One channel of the causal conv: its weights and window in registers, one row at a time (the
// plain kernel and the fused conv + prep kernel share it, so both give the same bits).
struct ConvChannel {
  float win[kMaxConvKernel];
  float wc[kMaxConvKernel];
  int kernel = 0;
  __device__ void load(const float* w, const float* state, int64_t channels, int64_t c, int k) {
    kernel = k;
    for (int j = 0; j < kernel; ++j) wc[j] = w[c * kernel + j];
    for (int j = 0; j < kernel - 1; ++j) win[j] = state[j * channels + c];
  }
  // Row t's output (SiLU of the window's dot product), written over x.
  __device__ float step(float* x, int64_t t, int64_t channels, int64_t c) {
    const int hist = kernel - 1;
    win[hist] = x[t * channels + c];
    float s = 0;
    for (int j = 0; j < kernel; ++j) s += wc[j] * win[j];
    const float out = silu_dev(s);
    x[t * channels + c] = out;
    for (int j = 0; j < hist; ++j) win[j] = win[j + 1];
    return out;
  }
  __device__ void store(float* state, int64_t channels, int64_t c) const {
    for (int j = 0; j < kernel - 1; ++j) state[j * channels + c] = win[j];
  }
};

__global__ void causal_conv_kernel(float* x, int64_t T, int64_t channels, const float* w, int kernel, float* state) {
  pdl_begin_early();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  ConvChannel ch;
  ch.load(w, state, channels, c, kernel);
  for (int64_t t = 0; t < T; ++t) ch.step(x, t, channels, c);
  ch.store(state, channels, c);
}

// β = σ(b) and the log decay g = −exp(A_log)·softplus(a + dt_bias) of row t, value head j.
__device__ __forceinline__ void gate_terms(const GdnPrepArgs& a, int64_t t, int64_t j) {
  a.beta[t * a.n_v + j] = sigmoid_dev(a.beta[t * a.n_v + j]);
  a.g[t * a.n_v + j] = -expf(a.a_log[j]) * softplus_dev(a.g[t * a.n_v + j] + a.dt_bias[j]);
}

// One block per row: the q/k heads' l2 norms (double, block_sum order per head), β and g.
__global__ void gdn_prep_kernel(GdnPrepArgs a, float q_scale) {
  pdl_begin_early();
  const int64_t t = blockIdx.x, key_dim = a.n_k * a.dk;
  for (int64_t h = 0; h < 2 * a.n_k; ++h) {
    float* x = a.mixed + t * a.conv_dim + (h < a.n_k ? h * a.dk : key_dim + (h - a.n_k) * a.dk);
    double ss = 0;
    for (int64_t i = threadIdx.x; i < a.dk; i += blockDim.x) ss += double(x[i]) * double(x[i]);
    ss = block_sum(ss);
    const float inv = float(1.0 / sqrt(ss + 1e-6));
    for (int64_t i = threadIdx.x; i < a.dk; i += blockDim.x) {
      const float v = x[i] * inv;
      x[i] = h < a.n_k ? v * q_scale : v;
    }
  }
  for (int64_t j = threadIdx.x; j < a.n_v; j += blockDim.x) gate_terms(a, t, j);
}

// The fused decode form of causal_conv + gdn_prep (T rows of one sequence): blocks [0, 2·n_k)
// each own one q/k head (its dk <= 128 channels, one per thread): conv row t, then the head's l2
// norm of row t with gdn_prep_kernel's block size (128) and order; the next blocks conv the value
// channels, 128 per block; the last block computes β and g of every row. Same bits as the two
// kernels one after the other; one launch, and the heads' norms run in parallel.
constexpr int kConvPrepThreads = 128;
__global__ void __launch_bounds__(kConvPrepThreads)
    conv_prep_kernel(const float* w, int kernel, float* state, GdnPrepArgs a, float q_scale) {
  pdl_begin_early();
  const int64_t b = blockIdx.x, n_qk = 2 * a.n_k, channels = a.conv_dim, T = a.rows;
  const int64_t v0 = n_qk * a.dk, n_vblocks = (channels - v0 + kConvPrepThreads - 1) / kConvPrepThreads;
  if (b < n_qk) {
    const int64_t c = b * a.dk + threadIdx.x;
    const bool mine = threadIdx.x < a.dk;
    ConvChannel ch;
    if (mine) ch.load(w, state, channels, c, kernel);
    for (int64_t t = 0; t < T; ++t) {
      const float v = mine ? ch.step(a.mixed, t, channels, c) : 0.0f;
      double ss = mine ? double(v) * double(v) : 0.0;
      ss = block_sum(ss);
      const float inv = float(1.0 / sqrt(ss + 1e-6));
      if (mine) a.mixed[t * channels + c] = b < a.n_k ? v * inv * q_scale : v * inv;
    }
    if (mine) ch.store(state, channels, c);
  } else if (b < n_qk + n_vblocks) {
    const int64_t c = v0 + (b - n_qk) * kConvPrepThreads + threadIdx.x;
    if (c >= channels) return;
    ConvChannel ch;
    ch.load(w, state, channels, c, kernel);
    for (int64_t t = 0; t < T; ++t) ch.step(a.mixed, t, channels, c);
    ch.store(state, channels, c);
  } else {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = threadIdx.x; j < a.n_v; j += blockDim.x) gate_terms(a, t, j);
  }
}

// DK > 0: the column lives in registers (DK values); DK == 0: in the state array itself.
// NORM: the gated RMSNorm of each output row follows in the same block (one block per head,
// blockDim == dv == kGatedNormThreads: rmsnorm_gated's block size for dv <= 128, and its order).
constexpr int kGatedNormThreads = 128;
template <int DK, bool NORM>
__global__ void gdn_recurrence_kernel(GdnRecurrentArgs a, GatedNormArgs nw) {
  pdl_begin_early();
  extern __shared__ float qk[];  // [2, dk]: this token's q and k of the head's key head
  const int64_t j = blockIdx.x, c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x, dk = DK > 0 ? DK : a.dk, dv = a.dv;
  const int64_t kh = j / (a.n_v / a.n_k);
  float* S = a.state + j * dk * dv;
  float col[DK > 0 ? DK : 1];
  if constexpr (DK > 0) {
#pragma unroll
    for (int r = 0; r < DK; ++r) col[r] = c < dv ? S[r * dv + c] : 0.0f;
  }
  for (int64_t t = 0; t < a.T; ++t) {
    __syncthreads();
    for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
      qk[i] = a.q[t * a.q_stride + kh * dk + i];
      qk[dk + i] = a.k[t * a.q_stride + kh * dk + i];
    }
    __syncthreads();
    if (!NORM && c >= dv) continue;
    const float decay = expf(a.g[t * a.n_v + j]);
    const float beta = a.beta[t * a.n_v + j];
    float kv = 0;
    if constexpr (DK > 0) {
#pragma unroll
      for (int r = 0; r < DK; ++r) {
        col[r] *= decay;
        kv += col[r] * qk[dk + r];
      }
    } else {
      for (int64_t r = 0; r < dk; ++r) {
        const float s = S[r * dv + c] * decay;
        S[r * dv + c] = s;
        kv += s * qk[dk + r];
      }
    }
    const float delta = (a.v[t * a.v_stride + j * dv + c] - kv) * beta;
    float o = 0;
    if constexpr (DK > 0) {
#pragma unroll
      for (int r = 0; r < DK; ++r) {
        col[r] += qk[dk + r] * delta;
        o += col[r] * qk[r];
      }
    } else {
      for (int64_t r = 0; r < dk; ++r) {
        const float s = S[r * dv + c] + qk[dk + r] * delta;
        S[r * dv + c] = s;
        o += s * qk[r];
      }
    }
    if constexpr (NORM) {  // rmsnorm_gated_kernel's arithmetic on this row (c < dv: dv == blockDim)
      double ss = 0;
      ss += double(o) * double(o);
      ss = block_sum(ss);
      const float inv = float(1.0 / sqrt(ss / double(dv) + double(nw.eps)));
      o = nw.w[c] * (o * inv) * silu_dev(nw.z[(t * a.n_v + j) * dv + c]);
    }
    a.out[(t * a.n_v + j) * dv + c] = o;
  }
  if constexpr (DK > 0) {
    if (c < dv) {
#pragma unroll
      for (int r = 0; r < DK; ++r) S[r * dv + c] = col[r];
    }
  }
}

}  // namespace

void gdn_unpack(const float* qkvz, const float* ba, int64_t rows, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv,
                float* mixed, float* z, float* b, float* a, cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(gdn_unpack_kernel, unsigned(rows), 256, 0, stream, qkvz, ba, n_k, n_v, dk, dv, mixed, z, b, a);
  WEFT_CUDA_LAUNCHED();
}

void causal_conv(float* x, int64_t T, int64_t channels, const float* w, int64_t kernel, float* conv_state,
                 cudaStream_t stream) {
  if (kernel < 1 || kernel > kMaxConvKernel)
    throw std::runtime_error("CUDA causal conv supports kernel sizes 1..8, got " + std::to_string(kernel));
  if (T == 0) return;
  launch_pdl(causal_conv_kernel, blocks_for(channels, 128), 128, 0, stream, x, T, channels, w, int(kernel), conv_state);
  WEFT_CUDA_LAUNCHED();
}

void gdn_prep(const GdnPrepArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const float q_scale = 1.0f / std::sqrt(float(a.dk));
  launch_pdl(gdn_prep_kernel, unsigned(a.rows), 128, 0, stream, a, q_scale);
  WEFT_CUDA_LAUNCHED();
}

bool conv_prep_fusable(const GdnPrepArgs& a, int64_t kernel) {
  return a.dk >= 1 && a.dk <= kConvPrepThreads && kernel >= 1 && kernel <= kMaxConvKernel && a.conv_dim >= 2 * a.n_k * a.dk;
}

void causal_conv_prep(const float* w, int64_t kernel, float* conv_state, const GdnPrepArgs& a, cudaStream_t stream) {
  if (!conv_prep_fusable(a, kernel)) throw std::runtime_error("causal_conv_prep: shape not supported");
  if (a.rows == 0) return;
  const float q_scale = 1.0f / std::sqrt(float(a.dk));
  const int64_t v0 = 2 * a.n_k * a.dk, blocks = 2 * a.n_k + (a.conv_dim - v0 + kConvPrepThreads - 1) / kConvPrepThreads + 1;
  launch_pdl(conv_prep_kernel, unsigned(blocks), kConvPrepThreads, 0, stream, w, int(kernel), conv_state, a, q_scale);
  WEFT_CUDA_LAUNCHED();
}

void gdn_recurrence(const GdnRecurrentArgs& a, cudaStream_t stream) {
  if (a.T == 0) return;
  if (a.dv > 1024) throw std::runtime_error("CUDA GDN recurrence supports value heads up to 1024");
  // A head's columns are independent: 32 per block (blockIdx.y), so a decode step's 32 heads fill
  // 128 SMs instead of 32; each column's arithmetic is unchanged.
  const unsigned threads = 32;
  const dim3 grid(unsigned(a.n_v), unsigned((a.dv + 31) / 32));
  const size_t smem = size_t(2 * a.dk) * sizeof(float);
  const GatedNormArgs none{};
  if (a.dk == 128) launch_pdl(gdn_recurrence_kernel<128, false>, grid, threads, smem, stream, a, none);
  else if (a.dk == 64) launch_pdl(gdn_recurrence_kernel<64, false>, grid, threads, smem, stream, a, none);
  else if (a.dk == 32) launch_pdl(gdn_recurrence_kernel<32, false>, grid, threads, smem, stream, a, none);
  else launch_pdl(gdn_recurrence_kernel<0, false>, grid, threads, smem, stream, a, none);
  WEFT_CUDA_LAUNCHED();
}

bool gdn_recurrence_norm_fusable(const GdnRecurrentArgs& a) { return a.dv == kGatedNormThreads; }

void gdn_recurrence_norm(const GdnRecurrentArgs& a, const GatedNormArgs& nw, cudaStream_t stream) {
  if (!gdn_recurrence_norm_fusable(a)) throw std::runtime_error("gdn_recurrence_norm: value heads of 128 only");
  if (a.T == 0) return;
  const size_t smem = size_t(2 * a.dk) * sizeof(float);
  const unsigned grid = unsigned(a.n_v), threads = kGatedNormThreads;
  if (a.dk == 128) launch_pdl(gdn_recurrence_kernel<128, true>, grid, threads, smem, stream, a, nw);
  else if (a.dk == 64) launch_pdl(gdn_recurrence_kernel<64, true>, grid, threads, smem, stream, a, nw);
  else if (a.dk == 32) launch_pdl(gdn_recurrence_kernel<32, true>, grid, threads, smem, stream, a, nw);
  else launch_pdl(gdn_recurrence_kernel<0, true>, grid, threads, smem, stream, a, nw);
  WEFT_CUDA_LAUNCHED();
}

}  // namespace weft::cuda
