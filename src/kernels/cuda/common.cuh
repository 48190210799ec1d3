// Shared helpers of the CUDA kernels: error checks, launch sizes, element conversions and the
// block reductions every row kernel uses. A reduction here always has one fixed order (thread i
// sums elements i, i + blockDim, ... in order; then a fixed tree over the threads), so a row's
// result depends only on that row and the block size, never on the other rows of a batch.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace weft::cuda {

// Throws std::runtime_error naming the call and CUDA's message when e is not cudaSuccess.
void check(cudaError_t e, const char* what);
#define WEFT_CUDA_CHECK(expr) ::weft::cuda::check((expr), #expr)
// Checks the launch just made (configuration errors surface here, not later).
#define WEFT_CUDA_LAUNCHED() ::weft::cuda::check(cudaGetLastError(), "kernel launch")

// Programmatic dependent launch (PDL): a kernel launched with launch_pdl may be scheduled while
// its predecessor on the stream is still running (from the moment every block of the predecessor
// has passed pdl_begin), so its launch and block set-up overlap the predecessor's tail instead of
// following it. Correctness rests on one rule: every kernel launched with launch_pdl calls
// pdl_begin() in every block before it reads or writes any memory another kernel writes or reads
// (only constant weights may be touched before, e.g. prefetched into L2). pdl_begin's wait returns
// once the predecessor has completed and its writes are visible; since the predecessor itself
// waited for its own predecessor before completing, that covers everything earlier on the stream.
// Kernels launched with <<<>>> (attention, KV append) keep the full dependency; the wait is a
// no-op for them. Nothing here changes any arithmetic: same bits with PDL on or off.
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// The same for the small kernels (norms, routing, combine, GDN steps): they let their successor be
// scheduled before they wait themselves, so a weight product that follows a small kernel starts
// prefetching its weights while the product before the small kernel is still streaming. Still
// safe: the successor's own wait returns only after this kernel completed, which is after this
// kernel's wait returned. The look-ahead stays one product deep, as products trigger after waiting.
__device__ __forceinline__ void pdl_begin_early() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Whether launch_pdl sets the PDL attribute: WEFT_CUDA_PDL=0 turns it off (default on). Each
// CUDA backend sets it from the environment when it is created (so a test can compare both).
bool pdl_enabled();
void set_pdl_enabled(bool on);
bool pdl_enabled_by_env();
// The line of `p` into L2 (a hint; no value is read).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when pdl_enabled().
// The kernel must begin with pdl_begin() (see above). Launch errors throw, naming `kernel launch`.
template <typename... P, typename... A>
void launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...), "kernel launch");
}

inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float sigmoid_dev(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_dev(float x) { return x / (1.0f + expf(-x)); }
// y + g·x as one fma: the formula of add_sigmoid_scaled, shared with its fused twin (same bits).
__device__ __forceinline__ float gated_add_dev(float y, float g, float x) { return fmaf(g, x, y); }
// acc + w·v as one fma: one step of moe_combine's weighted sum, shared with the expert product
// that folds the combine in (same bits).
__device__ __forceinline__ float combine_step_dev(float acc, float w, float v) { return fmaf(w, v, acc); }
// silu(g)·u: the formula of swiglu, shared with the products that fold it into their input.
__device__ __forceinline__ float swiglu_dev(float g, float u) { return silu_dev(g) * u; }
__device__ __forceinline__ float softplus_dev(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024), the same on every thread.
// Order: warp butterflies (xor 16, 8, 4, 2, 1), then warp 0 sums the warp totals the same way.
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T warp_sums[32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  T total = lane < n_warps ? warp_sums[lane] : T(0);
  for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
  return total;
}

}  // namespace weft::cuda
