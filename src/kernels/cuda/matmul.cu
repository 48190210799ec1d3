#include "kernels/cuda/matmul.cuh"

#include <atomic>
#include <cstdlib>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/moe_route_dev.cuh"
#include "kernels/cuda/weight_types.cuh"

namespace weft::cuda {
namespace {

constexpr int kRowsPerWarp = 4;
constexpr int kTokensPerPass = 8;
constexpr int kWarpsPerBlock = 4;

// 8 consecutive weights starting at k (16-byte aligned for 2-byte types, 32 for f32; the block
// types' device rows are read with the loads vec_row_align names: weight_layout.cuh).
template <DType D>
__device__ __forceinline__ void load_w8(const uint8_t* row, int64_t k, int64_t K, float* out) {
  if constexpr (D == DType::kQ8_0) {
    const uint2 q = *reinterpret_cast<const uint2*>(row + k);
    const float d = f16_bits_to_f32(q8_0_scale_bits(row, K, k));
    q8_0_unpack4(q.x, d, out), q8_0_unpack4(q.y, d, out + 4);
  } else if constexpr (D == DType::kQ4_0) {
    q4_0_unpack8(*reinterpret_cast<const uint32_t*>(row + k / 2), f16_bits_to_f32(q4_0_scale_bits(row, K, k)), out);
  } else if constexpr (D == DType::kQ4_K) {
    q4_k_unpack8(*reinterpret_cast<const uint32_t*>(row + k / 2),
                 *reinterpret_cast<const uint4*>(row + K / 2 + 16 * (k / 256)), int((k % 256) / 32), out);
  } else if constexpr (D == DType::kQ5_K) {
    q5_k_unpack8(*reinterpret_cast<const uint32_t*>(row + k / 2), row[K / 2 + k / 8],
                 *reinterpret_cast<const uint4*>(q5_k_header(row, K, k)), int((k % 256) / 32), out);
  } else if constexpr (D == DType::kQ6_K) {
    const uint8_t* h = q6_k_header(row, K, k);
    q6_k_unpack8(*reinterpret_cast<const uint32_t*>(row + k / 2), *reinterpret_cast<const uint16_t*>(row + K / 2 + k / 4),
                 int(int8_t(h[(k % 256) / 16])), f16_bits_to_f32(*reinterpret_cast<const uint16_t*>(h + 16)), out);
  } else if constexpr (D == DType::kF32) {
    const float4 a = *reinterpret_cast<const float4*>(reinterpret_cast<const float*>(row) + k);
    const float4 b = *reinterpret_cast<const float4*>(reinterpret_cast<const float*>(row) + k + 4);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(row) + k);
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = uint16_t(words[i] & 0xffffu), hi = uint16_t(words[i] >> 16);
      if constexpr (D == DType::kF16) out[2 * i] = f16_bits_to_f32(lo), out[2 * i + 1] = f16_bits_to_f32(hi);
      else out[2 * i] = bf16_bits_to_f32(lo), out[2 * i + 1] = bf16_bits_to_f32(hi);
    }
  }
}

// VEC: weights and activations aligned for 16-byte loads and K % 8 == 0 (same order as scalar).
// One block's tile: weight rows from block bx, tokens from block by.
template <DType D, bool VEC>
__device__ __forceinline__ void matmul_tile(const uint8_t* w, size_t row_bytes, int64_t N, int64_t K, const float* x,
                                            int64_t ldx, int64_t T, float* y, int64_t ldy, unsigned bx, unsigned by) {
  const int lane = threadIdx.x % 32;
  const int64_t n0 = (int64_t(bx) * kWarpsPerBlock + threadIdx.x / 32) * kRowsPerWarp;
  const int64_t t0 = int64_t(by) * kTokensPerPass;
  if (n0 >= N || t0 >= T) return;
  const int n_rows = int(N - n0 < kRowsPerWarp ? N - n0 : kRowsPerWarp);
  const int n_tok = int(T - t0 < kTokensPerPass ? T - t0 : kTokensPerPass);
  const uint8_t* rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) rows[r] = w + size_t(n0 + (r < n_rows ? r : 0)) * row_bytes;
  float acc[kRowsPerWarp][kTokensPerPass];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int t = 0; t < kTokensPerPass; ++t) acc[r][t] = 0.0f;

  for (int64_t k0 = int64_t(lane) * 8; k0 < K; k0 += 256) {
    const int n_k = int(K - k0 < 8 ? K - k0 : 8);
    float wv[kRowsPerWarp][8];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      if (VEC) {
        load_w8<D>(rows[r], k0, K, wv[r]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) wv[r][j] = j < n_k ? weight_at<D>(rows[r], K, k0 + j) : 0.0f;
      }
    }
#pragma unroll
    for (int t = 0; t < kTokensPerPass; ++t) {
      if (t >= n_tok) break;
      const float* xt = x + (t0 + t) * ldx + k0;
      float xv[8];
      if (VEC) {
        const float4 a = *reinterpret_cast<const float4*>(xt);
        const float4 b = *reinterpret_cast<const float4*>(xt + 4);
        xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) xv[j] = j < n_k ? xt[j] : 0.0f;
      }
      // Past n_k both operands are zero, and fmaf(0, 0, acc) == acc: the order stays the same.
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r][t] = fmaf(wv[r][j], xv[j], acc[r][t]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int t = 0; t < kTokensPerPass; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0 && r < n_rows && t < n_tok) y[(t0 + t) * ldy + n0 + r] = v;
    }
}

// The one-token form (decode): one warp per weight row and the same per-element order as
// matmul_tile's VEC path (lane l: groups k/8 ≡ l mod 32 in increasing k, fmaf over the 8 elements
// of a group in order, then the xor butterfly), so its bits are those of a token inside a batch.
// Why a second kernel: matmul_tile keeps 4 rows x 8 tokens of accumulators per warp and 16 rows
// per block, which at T = 1 leaves a 2048-row matrix 128 blocks (under one per SM) with few bytes
// in flight; here a block is 8 rows, and each lane keeps up to kMatvecGroups groups (a whole
// 2048-column bf16 row) in flight.
constexpr int kMatvecWarps = 8;
constexpr int kMatvecGroups = 8;

// 8 activations from k (16-byte aligned); SWIGLU: silu(x)·up, swiglu's formula (same bits as
// running swiglu first and reading its output).
template <bool SWIGLU>
__device__ __forceinline__ void load_x8(const float* x, const float* up, int64_t k, float* xv) {
  const float4 a = *reinterpret_cast<const float4*>(x + k);
  const float4 b = *reinterpret_cast<const float4*>(x + k + 4);
  xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
  if constexpr (SWIGLU) {
    const float4 c = *reinterpret_cast<const float4*>(up + k);
    const float4 d = *reinterpret_cast<const float4*>(up + k + 4);
    const float uv[8] = {c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) xv[j] = swiglu_dev(xv[j], uv[j]);
  }
}

// A group of 8 weights as loaded (16 bytes for 2-byte types, 32 for f32; for the block types
// their quants, scale bits and, for q4_K and q5_K, the sub-block index in a and the super-block
// header in b),
// unpacked at use: a lane keeps kMatvecGroups groups in flight in 32 registers.
struct Raw8 {
  uint4 a, b;
};
template <DType D>
__device__ __forceinline__ Raw8 load_raw8(const uint8_t* row, int64_t k, int64_t K) {
  Raw8 r;
  if constexpr (D == DType::kQ8_0) {
    const uint2 q = *reinterpret_cast<const uint2*>(row + k);
    r.a.x = q.x, r.a.y = q.y, r.a.z = q8_0_scale_bits(row, K, k);
  } else if constexpr (D == DType::kQ4_0) {
    r.a.x = *reinterpret_cast<const uint32_t*>(row + k / 2), r.a.z = q4_0_scale_bits(row, K, k);
  } else if constexpr (D == DType::kQ4_K) {
    r.a.x = *reinterpret_cast<const uint32_t*>(row + k / 2), r.a.w = uint32_t((k % 256) / 32);
    r.b = *reinterpret_cast<const uint4*>(row + K / 2 + 16 * (k / 256));
  } else if constexpr (D == DType::kQ5_K) {
    r.a.x = *reinterpret_cast<const uint32_t*>(row + k / 2), r.a.y = row[K / 2 + k / 8];
    r.a.w = uint32_t((k % 256) / 32);
    r.b = *reinterpret_cast<const uint4*>(q5_k_header(row, K, k));
  } else if constexpr (D == DType::kQ6_K) {
    const uint8_t* h = q6_k_header(row, K, k);
    r.a.x = *reinterpret_cast<const uint32_t*>(row + k / 2);
    r.a.y = *reinterpret_cast<const uint16_t*>(row + K / 2 + k / 4);
    r.a.z = uint32_t(int32_t(int8_t(h[(k % 256) / 16])));
    r.a.w = *reinterpret_cast<const uint16_t*>(h + 16);
  } else if constexpr (D == DType::kF32) {
    const uint4* p = reinterpret_cast<const uint4*>(reinterpret_cast<const float*>(row) + k);
    r.a = p[0], r.b = p[1];
  } else {
    r.a = *reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(row) + k);
    r.b = r.a;
  }
  return r;
}
template <DType D>
__device__ __forceinline__ void unpack8(const Raw8& r, float* out) {
  if constexpr (D == DType::kQ8_0) {
    const float d = f16_bits_to_f32(uint16_t(r.a.z));
    q8_0_unpack4(r.a.x, d, out), q8_0_unpack4(r.a.y, d, out + 4);
  } else if constexpr (D == DType::kQ4_0) {
    q4_0_unpack8(r.a.x, f16_bits_to_f32(uint16_t(r.a.z)), out);
  } else if constexpr (D == DType::kQ4_K) {
    q4_k_unpack8(r.a.x, r.b, int(r.a.w), out);
  } else if constexpr (D == DType::kQ5_K) {
    q5_k_unpack8(r.a.x, r.a.y, r.b, int(r.a.w), out);
  } else if constexpr (D == DType::kQ6_K) {
    q6_k_unpack8(r.a.x, r.a.y, int(int32_t(r.a.z)), f16_bits_to_f32(uint16_t(r.a.w)), out);
  } else if constexpr (D == DType::kF32) {
    out[0] = __uint_as_float(r.a.x), out[1] = __uint_as_float(r.a.y), out[2] = __uint_as_float(r.a.z);
    out[3] = __uint_as_float(r.a.w), out[4] = __uint_as_float(r.b.x), out[5] = __uint_as_float(r.b.y);
    out[6] = __uint_as_float(r.b.z), out[7] = __uint_as_float(r.b.w);
  } else {
    const uint32_t words[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = uint16_t(words[i] & 0xffffu), hi = uint16_t(words[i] >> 16);
      if constexpr (D == DType::kF16) out[2 * i] = f16_bits_to_f32(lo), out[2 * i + 1] = f16_bits_to_f32(hi);
      else out[2 * i] = bf16_bits_to_f32(lo), out[2 * i + 1] = bf16_bits_to_f32(hi);
    }
  }
}

// Groups per lane in one pass of matvec_rows, and a pass's weights as loaded (raw, unpacked at use).
template <DType D, int R, bool WIDE>
constexpr int matvec_pass_groups() {
  return (D == DType::kF32 ? kMatvecGroups / 2 : kMatvecGroups) / R * (WIDE ? 2 : 1);
}
template <DType D, int R, bool WIDE>
struct MatvecPass {
  Raw8 raw[R][matvec_pass_groups<D, R, WIDE>()];
};
// The loads of the pass at k0 (the lane's first column of it) for rows r < n_rows.
template <DType D, int R, bool WIDE>
__device__ __forceinline__ void load_pass(MatvecPass<D, R, WIDE>& p, const uint8_t* const* rows, int n_rows, int64_t K,
                                          int64_t k0) {
  constexpr int G = matvec_pass_groups<D, R, WIDE>();
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int u = 0; u < G; ++u)
      if (r < n_rows && k0 + u * 256 < K) p.raw[r][u] = load_raw8<D>(rows[r], k0 + u * 256, K);
}

// R weight rows against x, each in the per-element order of the header (R accumulators, each the
// same fma chain as alone). Every load of a pass (kMatvecGroups groups per lane over the R rows: a
// whole 2048-column bf16 row per warp when R = 1) is issued before the first fma, so a pass costs
// one memory round trip; with R = 2 each activation load serves two rows. Rows r >= n_rows are
// neither read nor summed (their result is garbage and not stored).
// WIDE (R = 1): twice the groups in flight per pass (a whole 4096-column bf16 row).
// PRE: the first pass's weights were loaded by the caller (load_pass at lane·8, e.g. before its
// PDL wait) and are in *pre; the same values in the same order, so the same bits.
template <DType D, bool SWIGLU, int R, bool WIDE = false, bool PRE = false>
__device__ __forceinline__ void matvec_rows(const uint8_t* const* rows, int n_rows, int64_t K, const float* x,
                                            int lane, const float* up, float* out,
                                            const MatvecPass<D, R, WIDE>* pre = nullptr) {
  static_assert(!WIDE || R == 1, "wide passes for one row per warp");
  constexpr int G = matvec_pass_groups<D, R, WIDE>();
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  auto pass = [&](const MatvecPass<D, R, WIDE>& p, int64_t k0) {
#pragma unroll
    for (int u = 0; u < G; ++u) {
      if (k0 + u * 256 >= K) break;
      float xv[8];
      load_x8<SWIGLU>(x, up, k0 + u * 256, xv);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= n_rows) break;
        float wv[8];
        unpack8<D>(p.raw[r][u], wv);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] = fmaf(wv[j], xv[j], acc[r]);
      }
    }
  };
  int64_t k0 = int64_t(lane) * 8;
  if constexpr (PRE) {
    pass(*pre, k0);
    k0 += G * 256;
  }
  for (; k0 < K; k0 += G * 256) {
    MatvecPass<D, R, WIDE> p;
    load_pass(p, rows, n_rows, K, k0);
    pass(p, k0);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    out[r] = acc[r];
  }
}

template <DType D, bool SWIGLU = false>
__device__ __forceinline__ float matvec_row(const uint8_t* row, int64_t K, const float* x, int lane,
                                            const float* up = nullptr) {
  float v;
  matvec_rows<D, SWIGLU, 1>(&row, 1, K, x, lane, up, &v);
  return v;
}

template <DType D>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_kernel(const uint8_t* w, size_t row_bytes, int64_t N, int64_t K, const float* x, float* y) {
  pdl_begin();
  const int64_t n = int64_t(blockIdx.x) * kMatvecWarps + threadIdx.x / 32;
  if (n >= N) return;
  const float v = matvec_row<D>(w + size_t(n) * row_bytes, K, x, threadIdx.x % 32);
  if (threadIdx.x % 32 == 0) y[n] = v;
}

// blockIdx.x runs over the jobs' row blocks back to back.
struct MatvecBlocks {
  int begin[kMaxMatvecJobs + 1];
};
// How a product's input is formed: read as is, swiglu(x, up) per warp while loading, or swiglu(x,
// up) staged once per block in shared memory (K <= kSwigluStageMax; every warp of the block then
// reads it there: 8x fewer exp calls). The same values either way, so the same bits.
// kGateStaged: x·σ(gate) (mul_sigmoid's formula, the attention output gate) staged the same way.
// kNormStaged: the residual add + rmsnorm of NormInput staged (see matmul.cuh).
enum SwigluMode : int { kPlain = 0, kSwigluDirect = 1, kSwigluStaged = 2, kGateStaged = 3, kNormStaged = 4 };
constexpr int64_t kSwigluStageMax = 8192;
SwigluMode swiglu_mode(bool swiglu, int64_t K) {
  return !swiglu ? kPlain : K <= kSwigluStageMax ? kSwigluStaged : kSwigluDirect;
}

// All threads of the block: xs[i] = swiglu(x[i], up[i]) for i < K, then a barrier.
__device__ __forceinline__ void stage_swiglu(float* xs, const float* x, const float* up, int64_t K) {
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) xs[i] = swiglu_dev(x[i], up[i]);
  __syncthreads();
}

// All threads of the block: xs[i] = x[i]·σ(gate[i]) for i < K (mul_sigmoid's expression, so its
// bits), then a barrier. kStageBatch elements per thread with every load issued before the first
// product: two memory round trips for a 4096-wide row instead of one per element.
__device__ __forceinline__ void stage_gate(float* xs, const float* x, const float* gate, int64_t K) {
  constexpr int kBatch = 8;
  for (int64_t base = threadIdx.x; base < K; base += int64_t(blockDim.x) * kBatch) {
    float xv[kBatch], gv[kBatch];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t i = base + int64_t(q) * blockDim.x;
      if (i < K) xv[q] = x[i], gv[q] = gate[i];
    }
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t i = base + int64_t(q) * blockDim.x;
      if (i < K) xs[i] = xv[q] * sigmoid_dev(gv[q]);
    }
  }
  __syncthreads();
}

// The norm block size of rows.cu's norm_threads (the residual kernel's launch): the order of its
// sum of squares. Must stay equal to it (a test compares the bits).
__device__ __forceinline__ int norm_block(int64_t n) { return n >= 2048 ? 1024 : n >= 1024 ? 512 : 256; }
constexpr int kNormStageThreads = kMatvecWarps * 32;

// y[i] (+ σ(s)·shared[i]) of the residual kernel (same helpers, same bits).
__device__ __forceinline__ float residual_y(const ResidualArgs& a, float g, int64_t i) {
  const float yv = a.y[i];
  return a.shared ? gated_add_dev(yv, g, a.shared[i]) : yv;
}

// All threads of the block (kNormStageThreads): xs[i] = rmsnorm(x + y)[i] for i < n with
// residual_kernel<PRE, true>'s arithmetic: element i's x + y as there; the sum of squares as
// inv_rms over B = norm_block(n) threads (virtual thread t sums elements t, t + B, ... in
// increasing order; the warp butterflies of virtual warp t / 32 run on a real warp with the same
// lanes: real thread r plays virtual threads r, r + 256, ...; then warp 0 sums the B / 32 warp
// totals with block_sum's butterfly); then the scale. The global loads go kStageBatch per thread
// at a time, all issued before the first use (a 2048-wide row: one round trip per pass). Ends
// with a barrier.
__device__ void stage_norm(float* xs, const ResidualArgs& a, int64_t n) {
  constexpr int kBatch = 8;
  __shared__ double vsums[32];
  __shared__ float inv_s;
  const int B = norm_block(n), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float g = a.shared ? sigmoid_dev(a.s[0]) : 0.0f;
  for (int64_t base = threadIdx.x; base < n; base += int64_t(kNormStageThreads) * kBatch) {
    float xv[kBatch], yv[kBatch], sv[kBatch];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t i = base + int64_t(q) * kNormStageThreads;
      if (i < n) {
        xv[q] = a.x[i], yv[q] = a.y[i];
        if (a.shared) sv[q] = a.shared[i];
      }
    }
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t i = base + int64_t(q) * kNormStageThreads;
      if (i < n) xs[i] = xv[q] + (a.shared ? gated_add_dev(yv[q], g, sv[q]) : yv[q]);
    }
  }
  __syncthreads();
  for (int v = 0; v < B / kNormStageThreads; ++v) {
    const int t = v * kNormStageThreads + threadIdx.x;
    double ss = 0;
    for (int64_t i = t; i < n; i += B) ss += double(xs[i]) * double(xs[i]);
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) vsums[v * kMatvecWarps + warp] = ss;
  }
  __syncthreads();
  if (warp == 0) {
    double total = lane < B / 32 ? vsums[lane] : 0.0;
    for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
    if (lane == 0) inv_s = float(1.0 / sqrt(total / double(n) + double(a.eps)));
  }
  __syncthreads();
  const float inv = inv_s;
  for (int64_t base = threadIdx.x; base < n; base += int64_t(kNormStageThreads) * kBatch) {
    float wv[kBatch];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t i = base + int64_t(q) * kNormStageThreads;
      if (i < n) wv[q] = a.w[i];
    }
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t i = base + int64_t(q) * kNormStageThreads;
      if (i < n) xs[i] = xs[i] * inv * (a.plus_one ? 1.0f + wv[q] : wv[q]);
    }
  }
  __syncthreads();
}

// NormInput's writes, by the launch's last block to finish (every thread of every block calls this
// once its reads of x, y and its outputs are done; the fence orders each block's reads before its
// count). xs: the block's staged norm.
__device__ void norm_writes_in_last_block(const NormInput& in, const float* xs, int64_t n) {
  __shared__ bool last;
  __syncthreads();
  __threadfence();
  if (threadIdx.x == 0) last = atomicAdd(in.counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const ResidualArgs& a = in.a;
  const float g = a.shared ? sigmoid_dev(a.s[0]) : 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float yv = residual_y(a, g, i);
    if (a.shared) a.y[i] = yv;
    a.x[i] += yv;
    a.xn[i] = xs[i];
  }
  if (threadIdx.x == 0) *in.counter = 0u;
}

// The weight lines of a warp's rows into L2 (lane l: lines l, l + 32, ...): issued before
// pdl_begin's wait, they move while the previous kernel finishes (weights never change on the
// stream, so reading them early is safe); the loads after the wait then find them in L2.
template <DType D, int R>
__device__ __forceinline__ void prefetch_rows(const uint8_t* const* rows, int n_rows, int64_t K, int lane) {
  const int64_t bytes = D == DType::kQ8_0   ? K / 32 * 34
                        : D == DType::kQ4_0 ? K / 32 * 18
                        : D == DType::kQ4_K ? K / 256 * 144
                        : D == DType::kQ5_K ? K / 256 * 176
                        : D == DType::kQ6_K ? K / 256 * 210
                                            : K * int64_t(D == DType::kF32 ? 4 : 2);
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < n_rows)
      for (int64_t off = int64_t(lane) * 128; off < bytes; off += 32 * 128) prefetch_l2(rows[r] + off);
}

// RouteTail's routing, by the launch's last block to finish (every thread of every block calls
// this once its outputs are stored). The fence before the count makes each block's outputs
// visible device-wide before the last block can see its count; the routing reads them from L2.
__device__ void route_in_last_block(const RouteTail& t, float* shared) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(t.counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  route_one_row(shared, t.logits, t.E, t.K, t.renormalize, t.out);
  if (threadIdx.x == 0) *t.counter = 0u;
}

// EARLY: the first pass of weight loads (constant: no kernel writes weights while products run)
// is issued before pdl_begin's wait, into registers, so the product's first memory round trip
// overlaps its predecessor's tail instead of following it (cuda::matvec_early). Same bits.
// One block's work: rows of job j (the block's job, found by the caller) of weight type D.
template <DType D, int SW, int R, bool TAIL, bool WIDE, bool EARLY>
__device__ __forceinline__ void matvec_multi_block(const MatvecJobs& jobs, int j, const MatvecBlocks& blocks, int64_t K,
                                                   const float* x, const float* up, bool prefetch, const RouteTail& tail,
                                                   const NormInput& norm, float4* staged4) {
  const int64_t n0 = (int64_t(int(blockIdx.x) - blocks.begin[j]) * kMatvecWarps + threadIdx.x / 32) * R;
  const int n_rows = n0 >= jobs.N[j] ? 0 : int(jobs.N[j] - n0 < R ? jobs.N[j] - n0 : R);
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    rows[r] = static_cast<const uint8_t*>(jobs.w[j]) + size_t(n0 + (r < n_rows ? r : 0)) * jobs.row_bytes[j];
  MatvecPass<D, R, WIDE> pre;
  if constexpr (EARLY) {
    if (n_rows > 0) load_pass(pre, rows, n_rows, K, int64_t(threadIdx.x % 32) * 8);
  }
  if (prefetch) prefetch_rows<D, R>(rows, n_rows, K, threadIdx.x % 32);
  pdl_begin();
  if constexpr (SW == kSwigluStaged) {
    stage_swiglu(reinterpret_cast<float*>(staged4), x, up, K);
    x = reinterpret_cast<const float*>(staged4);
  } else if constexpr (SW == kGateStaged) {  // `up` holds the gate
    stage_gate(reinterpret_cast<float*>(staged4), x, up, K);
    x = reinterpret_cast<const float*>(staged4);
  } else if constexpr (SW == kNormStaged) {
    stage_norm(reinterpret_cast<float*>(staged4), norm.a, K);
    x = reinterpret_cast<const float*>(staged4);
  }
  if (n_rows > 0) {
    float v[R];
    matvec_rows<D, SW == kSwigluDirect, R, WIDE, EARLY>(rows, n_rows, K, x, threadIdx.x % 32, up, v, &pre);
    if (threadIdx.x % 32 == 0)
      for (int r = 0; r < n_rows; ++r) jobs.y[j][n0 + r] = v[r];
  }
  if constexpr (SW == kNormStaged) norm_writes_in_last_block(norm, x, K);
  if constexpr (TAIL) route_in_last_block(tail, reinterpret_cast<float*>(staged4));
}

__device__ __forceinline__ int matvec_block_job(const MatvecJobs& jobs, const MatvecBlocks& blocks) {
  int j = 0;
  while (j + 1 < jobs.n && int(blockIdx.x) >= blocks.begin[j + 1]) ++j;
  return j;
}

template <DType D, int SW, int R, bool TAIL = false, bool WIDE = false, bool EARLY = false>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_multi_kernel(MatvecJobs jobs, MatvecBlocks blocks, int64_t K, const float* x, const float* up,
                        bool prefetch, RouteTail tail, NormInput norm) {
  static_assert(!TAIL || (SW == kPlain && kMatvecWarps * 32 == kTopkThreads), "the routing tail: plain input, one routing block");
  extern __shared__ float4 staged4[];
  matvec_multi_block<D, SW, R, TAIL, WIDE, EARLY>(jobs, matvec_block_job(jobs, blocks), blocks, K, x, up, prefetch,
                                                  tail, norm, staged4);
}

// The same launch over jobs of different weight types (MatvecJobs::mixed: a bf16 router beside
// q8_0 expert products, as llama.cpp's quantizer leaves them): each block takes its job's type,
// a branch the whole block agrees on. Plain input only.
template <int R, bool WIDE, bool EARLY>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_mixed_kernel(MatvecJobs jobs, MatvecBlocks blocks, int64_t K, const float* x, bool prefetch) {
  const int j = matvec_block_job(jobs, blocks);
  const RouteTail tail{};
  const NormInput norm{};
  switch (jobs.type[j]) {
    case DType::kF32:
      matvec_multi_block<DType::kF32, kPlain, R, false, WIDE, false>(jobs, j, blocks, K, x, nullptr, prefetch, tail,
                                                                     norm, nullptr);
      break;
    case DType::kF16:
      matvec_multi_block<DType::kF16, kPlain, R, false, WIDE, EARLY>(jobs, j, blocks, K, x, nullptr, prefetch, tail,
                                                                     norm, nullptr);
      break;
    case DType::kQ8_0:
      matvec_multi_block<DType::kQ8_0, kPlain, R, false, WIDE, EARLY>(jobs, j, blocks, K, x, nullptr, prefetch, tail,
                                                                      norm, nullptr);
      break;
    case DType::kQ4_0:
      matvec_multi_block<DType::kQ4_0, kPlain, R, false, WIDE, EARLY>(jobs, j, blocks, K, x, nullptr, prefetch, tail,
                                                                      norm, nullptr);
      break;
    case DType::kQ4_K:
      matvec_multi_block<DType::kQ4_K, kPlain, R, false, WIDE, EARLY>(jobs, j, blocks, K, x, nullptr, prefetch, tail,
                                                                      norm, nullptr);
      break;
    case DType::kQ5_K:
      matvec_multi_block<DType::kQ5_K, kPlain, R, false, WIDE, EARLY>(jobs, j, blocks, K, x, nullptr, prefetch, tail,
                                                                      norm, nullptr);
      break;
    case DType::kQ6_K:
      matvec_multi_block<DType::kQ6_K, kPlain, R, false, WIDE, EARLY>(jobs, j, blocks, K, x, nullptr, prefetch, tail,
                                                                      norm, nullptr);
      break;
    default:
      matvec_multi_block<DType::kBF16, kPlain, R, false, WIDE, EARLY>(jobs, j, blocks, K, x, nullptr, prefetch, tail,
                                                                      norm, nullptr);
      break;
  }
}

// Whether the dense one-token products prefetch their weights into L2 before waiting on their
// predecessor: off by default, WEFT_CUDA_PREFETCH=1 turns it on. Measured slower (with PDL, 40-layer
// geometry at depth 4096: 209.5 tok/s with it, 216.9 without; docs/results.md §10), probably
// because the early requests compete with the running product's own loads. Same bits either way.
// Read once.
bool matvec_prefetch() {
  static const bool on = [] {
    const char* e = std::getenv("WEFT_CUDA_PREFETCH");
    return e && std::string(e) == "1";
  }();
  return on;
}

// Rows per warp of the one-token products (matvec_multi, the one-row expert products): 2 (each
// activation load serves two weight rows; measured 182.0 vs 178.0 tok/s on the 40-layer geometry,
// docs/results.md §10), or 1 with WEFT_CUDA_MATVEC_ROWS=1. The same bits either way. Read once.
int matvec_rows_per_warp() {
  static const int r = [] {
    const char* e = std::getenv("WEFT_CUDA_MATVEC_ROWS");
    return e && std::string(e) == "1" ? 1 : 2;
  }();
  return r;
}
// matvec_multi's rows per warp for a launch of `rows` weight rows in all: by default 1 when two
// would leave fewer than kSmallLaunchBlocks blocks (two per SM of an H200: the router + shared
// expert launch, the 2048-row out projections), so small products spread over every SM with more
// rows in flight per SM; else matvec_rows_per_warp(). WEFT_CUDA_MATVEC_ROWS=1|2 forces one
// setting everywhere. Same bits either way.
constexpr int64_t kSmallLaunchBlocks = 264;
int matvec_multi_rows_per_warp(int64_t rows) {
  static const bool forced = std::getenv("WEFT_CUDA_MATVEC_ROWS") != nullptr;
  if (forced) return matvec_rows_per_warp();
  return rows < kSmallLaunchBlocks * kMatvecWarps * 2 ? 1 : 2;
}
// Whether one-row-per-warp launches of K >= kWidePassK plain products keep twice the loads in
// flight per pass (matvec_rows' WIDE: the out projections' 4096-column rows in one pass instead of
// two; measured per kernel at 1.3 TB/s before, docs/results.md §10). WEFT_CUDA_MATVEC_WIDE=0 turns
// it off. Same bits (same per-lane order; only the loads issued before the first fma). Read once.
constexpr int64_t kWidePassK = 4096;
bool matvec_wide() {
  static const bool on = [] {
    const char* e = std::getenv("WEFT_CUDA_MATVEC_WIDE");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

// The routed experts of a one-row routing (decode): blockIdx.y picks the expert slot (each
// selected expert holds exactly that one row), blockIdx.z the projection.
// The loads of the block's prologue are issued together (the tile count, the tile's expert and the
// job; then the expert's weights and row), not one after another: a chain of dependent loads is
// microseconds before the first weight byte moves. tile_expert past *n_tiles lies inside the array
// (stale values) and is not used.
template <DType D, int SW, int R>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    expert_matvec_kernel(const ExpertMatmulJob* jobs, const int32_t* expert_begin, const int32_t* tile_expert,
                         const int32_t* n_tiles) {
  pdl_begin();
  extern __shared__ float4 staged4[];
  const int nt = *n_tiles, e = tile_expert[blockIdx.y];
  const ExpertMatmulJob j = jobs[blockIdx.z];
  if (int(blockIdx.y) >= nt) return;
  const void* w = j.w[e];
  const int64_t b = expert_begin[e];
  if (!w) return;
  const float* x = j.x + b * j.ldx;
  if constexpr (SW == kSwigluStaged) {
    stage_swiglu(reinterpret_cast<float*>(staged4), x, j.up + b * j.ldx, j.K);
    x = reinterpret_cast<const float*>(staged4);
  }
  const int64_t n0 = (int64_t(blockIdx.x) * kMatvecWarps + threadIdx.x / 32) * R;
  if (n0 >= j.N) return;
  const int n_rows = int(j.N - n0 < R ? j.N - n0 : R);
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = static_cast<const uint8_t*>(w) + size_t(n0 + (r < n_rows ? r : 0)) * j.row_bytes;
  float v[R];
  matvec_rows<D, SW == kSwigluDirect, R>(rows, n_rows, j.K, x, threadIdx.x % 32,
                                         SW == kSwigluDirect ? j.up + b * j.ldx : nullptr, v);
  if (threadIdx.x % 32 == 0)
    for (int r = 0; r < n_rows; ++r) j.y[b * j.ldy + n0 + r] = v[r];
}

// Stages swiglu(gate, up) of `n` elements into xs (all threads of the block), kStageBatch
// elements per thread at a time with every load issued before the first swiglu: a few memory
// round trips instead of one per slot. Element i of slot j reads input row row_of[j].
constexpr int kStageBatch = 8;
__device__ __forceinline__ void stage_slots(float* xs, const float* gate, const float* up, const int32_t* row_of,
                                            int64_t K, int64_t n) {
  for (int64_t base = threadIdx.x; base < n; base += int64_t(blockDim.x) * kStageBatch) {
    float g[kStageBatch], u[kStageBatch];
#pragma unroll
    for (int q = 0; q < kStageBatch; ++q) {
      const int64_t idx = base + int64_t(q) * blockDim.x;
      if (idx >= n) break;
      const int64_t j = idx / K, src = int64_t(row_of[j]) * K + (idx - j * K);
      g[q] = gate[src], u[q] = up[src];
    }
#pragma unroll
    for (int q = 0; q < kStageBatch; ++q) {
      const int64_t idx = base + int64_t(q) * blockDim.x;
      if (idx >= n) break;
      xs[idx] = swiglu_dev(g[q], u[q]);
    }
  }
}

// One warp per output row h (see down_combine in the header). The block reads the routing
// (position j's expert, input row and weight table entry; the loads of each step together), then
// each warp issues its first pass of weight loads before the block stages every slot's swiglu
// input (and the shared expert's) in shared memory ([k][K] then [s_K]), so the weights' latency
// overlaps the staging.
// EARLY (DownCombine::early): 0: everything after pdl_begin's wait. 1: the routing is read before
// the wait. Safe because the routing's writer is at least two launches back: the predecessor is
// the experts' gate/up launch, which reads the same routing, and this kernel can only be scheduled
// once every block of that launch has passed its own wait, i.e. once the routing launch (or the
// router launch's tail) has completed. The routing loads go through L2 (__ldcg), never a stale L1
// line of an earlier layer's routing. 2: also the first pass of weight loads (constant) before the
// wait. Same values read in every mode, so the same bits.
// The block types are held to two blocks per SM (the scale addresses per row would otherwise
// leave one; a few bytes spill instead).
template <DType D, int R, int EARLY>
__global__ void __launch_bounds__(kMatvecWarps * 32, dtype_is_block_quant_v<D> ? 2 : 1)
    down_combine_kernel(DownCombine a) {
  if constexpr (EARLY == 0) pdl_begin();
  extern __shared__ float4 staged4[];
  float* xs = reinterpret_cast<float*>(staged4);
  __shared__ const uint8_t* wrow[kMaxDownCombineRows];
  __shared__ int32_t pos[kMaxDownCombineRows];
  __shared__ int32_t zero_row[1];
  // tile_expert has at least k entries (moe_max_tiles), so it is read before n_tiles is known.
  const int n_tiles = __ldcg(a.n_tiles);
  const int e = int(threadIdx.x) < a.k ? __ldcg(a.tile_expert + threadIdx.x) : 0;
  const int nt = min(n_tiles, a.k);
  if (int(threadIdx.x) < nt) {
    pos[threadIdx.x] = __ldcg(a.expert_begin + e);
    wrow[threadIdx.x] = static_cast<const uint8_t*>(a.w[e]);
  }
  if (threadIdx.x == 0) zero_row[0] = 0;
  __syncthreads();
  if constexpr (EARLY == 1) pdl_begin();
  const int64_t h = int64_t(blockIdx.x) * kMatvecWarps + threadIdx.x / 32;
  const bool active = h < a.N;
  // Row r < nt: expert position r, input xs[r]; row nt (with a shared expert): the shared one.
  // Each row in matvec_rows' per-element order (lane l: groups ≡ l mod 32 in increasing k, fmaf
  // over a group's 8 elements in order, then the xor butterfly); one group per row in flight per
  // pass, all rows' loads issued before the first fma (few registers: two blocks per SM).
  const int n_rows = active ? nt + (a.sw ? 1 : 0) : 0;
  const int lane = threadIdx.x % 32;
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    rows[r] = a.sw && r == nt ? static_cast<const uint8_t*>(a.sw) + size_t(h) * a.s_row_bytes
                              : wrow[r < nt ? r : 0] + size_t(h) * a.row_bytes;
  const int64_t k_max = a.sw && a.s_K > a.K ? a.s_K : a.K;
  float v[R];
#pragma unroll
  for (int r = 0; r < R; ++r) v[r] = 0.0f;
  int64_t k0 = int64_t(lane) * 8;
  Raw8 raw[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < n_rows && k0 < (r == nt ? a.s_K : a.K)) raw[r] = load_raw8<D>(rows[r], k0, r == nt ? a.s_K : a.K);
  if constexpr (EARLY == 2) pdl_begin();
  stage_slots(xs, a.gate, a.up, pos, a.K, int64_t(nt) * a.K);
  float* sxs = xs + int64_t(a.k) * a.K;
  if (a.sw) stage_slots(sxs, a.s_gate, a.s_up, zero_row, a.s_K, a.s_K);
  __syncthreads();
  if (!active) return;
  for (; k0 < k_max; k0 += 256) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= n_rows) break;
      if (k0 >= (r == nt ? a.s_K : a.K)) continue;
      float wv[8], xv[8];
      unpack8<D>(raw[r], wv);
      load_x8<false>(r == nt ? sxs : xs + int64_t(r) * a.K, nullptr, k0, xv);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[r] = fmaf(wv[j], xv[j], v[r]);
    }
    if (k0 + 256 < k_max) {
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (r < n_rows && k0 + 256 < (r == nt ? a.s_K : a.K))
          raw[r] = load_raw8<D>(rows[r], k0 + 256, r == nt ? a.s_K : a.K);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v[r] += __shfl_xor_sync(0xffffffffu, v[r], off);
  if (lane != 0) return;
  // moe_combine's sum: positions in increasing order (expert order), weight of the slot there.
  float acc = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < nt) acc = combine_step_dev(acc, a.slot_weight[a.sorted_slot[pos[r]]], v[r]);
  a.y[h] = acc;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (a.sw && r == nt) a.s_y[h] = v[r];
}

template <DType D, bool VEC>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matmul_kernel(const uint8_t* w, size_t row_bytes, int64_t N, int64_t K, const float* x, int64_t ldx, int64_t T,
                  float* y, int64_t ldy) {
  pdl_begin();
  matmul_tile<D, VEC>(w, row_bytes, N, K, x, ldx, T, y, ldy, blockIdx.x, blockIdx.y);
}

// blockIdx.y picks a token tile of the routing, blockIdx.z the projection.
template <DType D, bool VEC>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    expert_matmul_kernel(const ExpertMatmulJob* jobs, const int32_t* expert_begin, const int32_t* tile_expert,
                         const int32_t* tile_t0, const int32_t* n_tiles) {
  pdl_begin();
  if (int(blockIdx.y) >= *n_tiles) return;
  const ExpertMatmulJob& j = jobs[blockIdx.z];
  const int e = tile_expert[blockIdx.y];
  const void* w = j.w[e];
  if (!w) return;
  const int64_t b = expert_begin[e], T = expert_begin[e + 1] - b;
  matmul_tile<D, VEC>(static_cast<const uint8_t*>(w), j.row_bytes, j.N, j.K, j.x + b * j.ldx, j.ldx, T,
                      j.y + b * j.ldy, j.ldy, blockIdx.x, unsigned(tile_t0[blockIdx.y] / kTokensPerPass));
}

template <DType D>
void launch(const void* w, size_t row_bytes, int64_t N, int64_t K, const float* x, int64_t ldx, int64_t T, float* y,
            int64_t ldy, cudaStream_t stream) {
  const dim3 grid(blocks_for(N, kWarpsPerBlock * kRowsPerWarp), unsigned((T + kTokensPerPass - 1) / kTokensPerPass));
  const bool vec = matmul_vec_ok(D, w, row_bytes, K, x, ldx);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  if (vec && T == 1) launch_pdl(matvec_kernel<D>, blocks_for(N, kMatvecWarps), kMatvecWarps * 32, 0, stream, wb, row_bytes, N, K, x, y);
  else if (vec) launch_pdl(matmul_kernel<D, true>, grid, kWarpsPerBlock * 32, 0, stream, wb, row_bytes, N, K, x, ldx, T, y, ldy);
  else launch_pdl(matmul_kernel<D, false>, grid, kWarpsPerBlock * 32, 0, stream, wb, row_bytes, N, K, x, ldx, T, y, ldy);
  WEFT_CUDA_LAUNCHED();
}

}  // namespace

size_t vec_row_align(DType d) {
  // WEFT_CUDA_VEC_ALIGN16=1: the earlier rule, 16 bytes for every type (A/B runs of one binary).
  static const bool align16 = [] {
    const char* v = std::getenv("WEFT_CUDA_VEC_ALIGN16");
    return v != nullptr && std::string(v) == "1";
  }();
  if (align16) return 16;
  switch (d) {
    case DType::kQ4_0:
    case DType::kQ6_K: return 4;
    case DType::kQ8_0: return 8;
    default: return 16;
  }
}

bool matmul_vec_ok(DType d, const void* w, size_t row_bytes, int64_t K, const float* x, int64_t ldx) {
  const size_t a = vec_row_align(d);
  return K % 8 == 0 && reinterpret_cast<uintptr_t>(w) % a == 0 && row_bytes % a == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
}

void expert_matmul(DType dtype, const ExpertMatmulJob* jobs, int64_t n_jobs, int64_t max_N,
                   const int32_t* expert_begin, const int32_t* tile_expert, const int32_t* tile_t0,
                   const int32_t* n_tiles, int64_t max_tiles, bool vec, bool one_row, int64_t swiglu_k,
                   cudaStream_t stream) {
  const bool swiglu = swiglu_k > 0;
  static_assert(kTokensPerPass == kMoeTileRows, "a routing tile is one token pass of the matmul tile");
  if (n_jobs == 0 || max_N == 0 || max_tiles == 0) return;
  if (swiglu && !(vec && one_row)) check(cudaErrorInvalidValue, "expert_matmul: swiglu input only on the one-row path");
  if (vec && one_row) {
    const int R = matvec_rows_per_warp();
    const dim3 g(blocks_for(max_N, kMatvecWarps * R), unsigned(max_tiles), unsigned(n_jobs));
    const SwigluMode mode = swiglu_mode(swiglu, swiglu_k);
    const size_t smem = mode == kSwigluStaged ? size_t(swiglu_k) * sizeof(float) : 0;
#define WEFT_EXPERT_VEC_R(D, RR)                                                                                                \
  (mode == kSwigluStaged   ? launch_pdl(expert_matvec_kernel<D, kSwigluStaged, RR>, g, kMatvecWarps * 32, smem, stream, jobs, expert_begin, tile_expert, n_tiles) \
   : mode == kSwigluDirect ? launch_pdl(expert_matvec_kernel<D, kSwigluDirect, RR>, g, kMatvecWarps * 32, 0, stream, jobs, expert_begin, tile_expert, n_tiles) \
                           : launch_pdl(expert_matvec_kernel<D, kPlain, RR>, g, kMatvecWarps * 32, 0, stream, jobs, expert_begin, tile_expert, n_tiles))
#define WEFT_EXPERT_VEC(D) (R == 2 ? WEFT_EXPERT_VEC_R(D, 2) : WEFT_EXPERT_VEC_R(D, 1))
    with_weight_type(dtype, "expert_matmul", [&](auto d) {
      constexpr DType D = decltype(d)::value;
      WEFT_EXPERT_VEC(D);
    });
#undef WEFT_EXPERT_VEC
#undef WEFT_EXPERT_VEC_R
    WEFT_CUDA_LAUNCHED();
    return;
  }
  const dim3 grid(blocks_for(max_N, kWarpsPerBlock * kRowsPerWarp), unsigned(max_tiles), unsigned(n_jobs));
  const unsigned threads = kWarpsPerBlock * 32;
#define WEFT_EXPERT(D)                                                                                       \
  (vec ? launch_pdl(expert_matmul_kernel<D, true>, grid, threads, 0, stream, jobs, expert_begin, tile_expert, tile_t0, n_tiles) \
       : launch_pdl(expert_matmul_kernel<D, false>, grid, threads, 0, stream, jobs, expert_begin, tile_expert, tile_t0, n_tiles))
  with_weight_type(dtype, "expert_matmul", [&](auto d) {
    constexpr DType D = decltype(d)::value;
    WEFT_EXPERT(D);
  });
#undef WEFT_EXPERT
  WEFT_CUDA_LAUNCHED();
}

namespace {
size_t down_combine_smem(int k, int64_t K, int64_t s_K) { return size_t(int64_t(k) * K + s_K) * sizeof(float); }
}  // namespace

bool down_combine_fits(int k, bool shared, int64_t K, int64_t s_K) {
  return k >= 1 && k + (shared ? 1 : 0) <= kMaxDownCombineRows && K % 8 == 0 && s_K % 8 == 0 &&
         down_combine_smem(k, K, shared ? s_K : 0) <= 46 * 1024;  // + the static arrays: within 48 KB
}

void down_combine(DType dtype, const DownCombine& a, cudaStream_t stream) {
  const bool shared = a.sw != nullptr;
  if (!down_combine_fits(a.k, shared, a.K, shared ? a.s_K : 0) || (shared && a.s_K == 0))
    check(cudaErrorInvalidValue, "down_combine: shape not supported");
  if (a.N == 0) return;
  const size_t smem = down_combine_smem(a.k, a.K, shared ? a.s_K : 0);
  const unsigned grid = blocks_for(a.N, kMatvecWarps), threads = kMatvecWarps * 32;
  const bool small = a.k + (shared ? 1 : 0) <= 10;
  if (a.early < 0 || a.early > 2) check(cudaErrorInvalidValue, "down_combine: early must be 0, 1 or 2");
#define WEFT_DOWN_COMBINE_E(D, RR)                                                                   \
  (a.early == 0   ? launch_pdl(down_combine_kernel<D, RR, 0>, grid, threads, smem, stream, a) \
   : a.early == 1 ? launch_pdl(down_combine_kernel<D, RR, 1>, grid, threads, smem, stream, a) \
                  : launch_pdl(down_combine_kernel<D, RR, 2>, grid, threads, smem, stream, a))
#define WEFT_DOWN_COMBINE(D) (small ? WEFT_DOWN_COMBINE_E(D, 10) : WEFT_DOWN_COMBINE_E(D, kMaxDownCombineRows))
  with_weight_type(dtype, "down_combine", [&](auto d) {
    constexpr DType D = decltype(d)::value;
    WEFT_DOWN_COMBINE(D);
  });
#undef WEFT_DOWN_COMBINE
#undef WEFT_DOWN_COMBINE_E
  WEFT_CUDA_LAUNCHED();
}

bool route_tail_fits(int64_t n_experts, int64_t k) {
  return k >= 1 && k <= kMaxK && k <= n_experts && size_t(3 * n_experts) * sizeof(float) <= 40 * 1024;
}

bool matvec_gate_fits(int64_t K) { return K > 0 && K <= kSwigluStageMax; }
bool matvec_norm_fits(int64_t K) { return K > 0 && K <= kSwigluStageMax; }

namespace {
// One matvec_multi launch's arguments, and the launch of its kernel with or without the early
// weight loads (EARLY is compiled for 2-byte weights and the modes whose input is formed after the
// wait; elsewhere `early` is ignored: the same kernel either way).
struct MatvecLaunch {
  unsigned grid, threads;
  size_t smem;
  cudaStream_t stream;
  const MatvecJobs& jobs;
  const MatvecBlocks& blocks;
  int64_t K;
  const float* x;
  bool prefetch;
  const RouteTail& tail;
  const NormInput& norm;
};
template <DType D, int SW, int R, bool TAIL = false, bool WIDE = false>
int launch_multi(const MatvecLaunch& l, const float* up, bool early) {
  if constexpr (D != DType::kF32 && !TAIL && SW != kSwigluDirect) {
    if (early) {
      launch_pdl(matvec_multi_kernel<D, SW, R, TAIL, WIDE, true>, l.grid, l.threads, l.smem, l.stream, l.jobs,
                 l.blocks, l.K, l.x, up, l.prefetch, l.tail, l.norm);
      return 0;
    }
  }
  launch_pdl(matvec_multi_kernel<D, SW, R, TAIL, WIDE>, l.grid, l.threads, l.smem, l.stream, l.jobs, l.blocks, l.K,
             l.x, up, l.prefetch, l.tail, l.norm);
  return 0;
}
std::atomic<bool> matvec_early_on{true};
}  // namespace

bool matvec_early() { return matvec_early_on.load(std::memory_order_relaxed); }
void set_matvec_early(bool on) { matvec_early_on.store(on, std::memory_order_relaxed); }

void matvec_multi(DType dtype, const MatvecJobs& jobs, int64_t K, const float* x, cudaStream_t stream,
                  const float* up, const RouteTail* tail, const float* sigmoid_gate, const NormInput* norm) {
  if (sigmoid_gate && (up || tail || !matvec_gate_fits(K)))
    check(cudaErrorInvalidValue, "matvec_multi: a sigmoid gate only on a plain input of at most 8192 columns");
  if (norm && (up || tail || sigmoid_gate || !matvec_norm_fits(K) || norm->a.rows != 1 || norm->a.n != K ||
               !norm->a.x || !norm->a.xn || !norm->counter))
    check(cudaErrorInvalidValue,
          "matvec_multi: a staged residual norm only on a plain one-row input of at most 8192 columns");
  MatvecBlocks blocks{};
  int64_t total_rows = 0;
  for (int j = 0; j < jobs.n; ++j) total_rows += jobs.N[j];
  const int R = matvec_multi_rows_per_warp(total_rows);
  for (int j = 0; j < jobs.n; ++j) blocks.begin[j + 1] = blocks.begin[j] + int(blocks_for(jobs.N[j], kMatvecWarps * R));
  if (jobs.n == 0 || blocks.begin[jobs.n] == 0) return;
  const unsigned grid = unsigned(blocks.begin[jobs.n]), threads = kMatvecWarps * 32;
  const SwigluMode mode = norm ? kNormStaged : sigmoid_gate ? kGateStaged : swiglu_mode(up != nullptr, K);
  const NormInput nin = norm ? *norm : NormInput{};
  if (sigmoid_gate) up = sigmoid_gate;  // the kernel's second input
  if (tail && (up || !route_tail_fits(tail->E, tail->K))) check(cudaErrorInvalidValue, "matvec_multi: routing tail not supported here");
  const RouteTail t = tail ? *tail : RouteTail{};
  const size_t smem = mode == kSwigluStaged || mode == kGateStaged || mode == kNormStaged ? size_t(K) * sizeof(float)
                      : tail                                        ? size_t(3 * t.E) * sizeof(float)
                                                                    : 0;
  const bool pf = matvec_prefetch();
  const bool wide = R == 1 && K >= kWidePassK && matvec_wide();
  const bool early = matvec_early();
  bool mixed = false;
  if (jobs.mixed) {
    for (int j = 0; j < jobs.n; ++j) {
      if (!matmul_supports(jobs.type[j])) check(cudaErrorInvalidValue, "matvec_multi: weight type not yet on CUDA");
      mixed = mixed || jobs.type[j] != jobs.type[0];
    }
    dtype = jobs.type[0];
  }
  if (mixed) {
    if (mode != kPlain || tail) check(cudaErrorInvalidValue, "matvec_multi: mixed weight types only on a plain input");
#define WEFT_MIXED(RR, WW, EE) launch_pdl(matvec_mixed_kernel<RR, WW, EE>, grid, threads, 0, stream, jobs, blocks, K, x, pf)
    // (No wide passes here: one body per type in one kernel leaves them too few registers.)
    if (R == 2) early ? WEFT_MIXED(2, false, true) : WEFT_MIXED(2, false, false);
    else early ? WEFT_MIXED(1, false, true) : WEFT_MIXED(1, false, false);
#undef WEFT_MIXED
    WEFT_CUDA_LAUNCHED();
    return;
  }
  const MatvecLaunch l{grid, threads, smem, stream, jobs, blocks, K, x, pf, t, nin};
#define WEFT_MATVEC_R(D, RR)                                                                                   \
  (mode == kNormStaged     ? (wide ? launch_multi<D, kNormStaged, 1, false, true>(l, nullptr, early)         \
                                   : launch_multi<D, kNormStaged, RR>(l, nullptr, early))                    \
   : mode == kGateStaged   ? (wide ? launch_multi<D, kGateStaged, 1, false, true>(l, up, early)              \
                                   : launch_multi<D, kGateStaged, RR>(l, up, early))                         \
   : mode == kSwigluStaged ? launch_multi<D, kSwigluStaged, RR>(l, up, early)                                \
   : mode == kSwigluDirect ? launch_multi<D, kSwigluDirect, RR>(l, up, early)                                \
   : tail                  ? launch_multi<D, kPlain, RR, true>(l, nullptr, early)                            \
   : wide                  ? launch_multi<D, kPlain, 1, false, true>(l, nullptr, early)                      \
                           : launch_multi<D, kPlain, RR>(l, nullptr, early))
#define WEFT_MATVEC(D) (R == 2 ? WEFT_MATVEC_R(D, 2) : WEFT_MATVEC_R(D, 1))
  with_weight_type(dtype, "matvec_multi", [&](auto d) {
    constexpr DType D = decltype(d)::value;
    WEFT_MATVEC(D);
  });
#undef WEFT_MATVEC
#undef WEFT_MATVEC_R
  WEFT_CUDA_LAUNCHED();
}

bool matmul_supports(DType dtype) { return is_cuda_weight_type(dtype); }

void matmul(DType dtype, const void* w, size_t row_bytes, int64_t N, int64_t K, const float* x, int64_t ldx,
            int64_t T, float* y, int64_t ldy, cudaStream_t stream) {
  if (T == 0 || N == 0) return;
  with_weight_type(dtype, "matmul", [&](auto d) { launch<decltype(d)::value>(w, row_bytes, N, K, x, ldx, T, y, ldy, stream); });
}

}  // namespace weft::cuda
