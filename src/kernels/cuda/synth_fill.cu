// The device generator of synthetic weights (recipe: kernels/synth_fill_args.h). Each operation
// is the host's: the same integer steps, the float multiply and add as __fmul_rn / __fadd_rn (no
// FMA contraction, as the host file is compiled with -ffp-contract=off), and round-to-nearest-even
// to the stored type (bf16 by the host's bit formula, f16 by __float2half_rn, which is IEEE's
// rounding like the host's f32_to_f16).
#include "kernels/cuda/synth_fill.cuh"

#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"

namespace weft::cuda {

namespace {

__device__ __forceinline__ uint64_t splitmix64_dev(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ uint64_t rotl_dev(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

struct Xoshiro256Dev {
  uint64_t s0, s1, s2, s3;
  __device__ explicit Xoshiro256Dev(uint64_t seed) {
    s0 = splitmix64_dev(&seed);
    s1 = splitmix64_dev(&seed);
    s2 = splitmix64_dev(&seed);
    s3 = splitmix64_dev(&seed);
  }
  __device__ __forceinline__ uint64_t next() {
    const uint64_t result = rotl_dev(s0 + s3, 23) + s0;
    const uint64_t t = s1 << 17;
    s2 ^= s0;
    s3 ^= s1;
    s1 ^= s2;
    s0 ^= s3;
    s2 ^= t;
    s3 = rotl_dev(s3, 45);
    return result;
  }
};

template <bool kUniform>
__device__ __forceinline__ float draw(Xoshiro256Dev& rng, float offset, float scale) {
  const uint64_t r = rng.next();
  float x;
  if constexpr (kUniform) {
    x = __fmul_rn(__uint2float_rn(uint32_t(r >> 40)), 1.0f / 16777216.0f);  // exact
  } else {
    const int32_t s = int32_t(r & 0xffff) + int32_t((r >> 16) & 0xffff) + int32_t((r >> 32) & 0xffff) +
                      int32_t(r >> 48) - 131070;
    x = __int2float_rn(s);  // exact: |s| < 2^18
  }
  return __fadd_rn(offset, __fmul_rn(x, scale));
}

// The host's f32_to_bf16 (core/dtype.h), NaN branch included.
__device__ __forceinline__ uint16_t bf16_bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ uint16_t f16_bits(float f) { return __half_as_ushort(__float2half_rn(f)); }

// Eight values per step, stored as one 16-byte write (two for f32) when dst is 16-byte aligned:
// a warp's 32 threads write 32 different chunks, so wide stores keep the write traffic in whole
// sectors. The tail (count % 8) and unaligned chunks go value by value; the values are the same.
template <DType D, bool kUniform>
__device__ void fill(const SynthChunk& c) {
  Xoshiro256Dev rng(c.seed);
  const float offset = c.offset, scale = c.scale;
  int64_t i = 0;
  if (reinterpret_cast<uintptr_t>(c.dst) % 16 == 0) {
    for (; i + 8 <= c.count; i += 8) {
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = draw<kUniform>(rng, offset, scale);
      if constexpr (D == DType::kF32) {
        float4* out = reinterpret_cast<float4*>(static_cast<float*>(c.dst) + i);
        out[0] = make_float4(v[0], v[1], v[2], v[3]);
        out[1] = make_float4(v[4], v[5], v[6], v[7]);
      } else {
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint16_t lo = D == DType::kBF16 ? bf16_bits(v[2 * j]) : f16_bits(v[2 * j]);
          const uint16_t hi = D == DType::kBF16 ? bf16_bits(v[2 * j + 1]) : f16_bits(v[2 * j + 1]);
          w[j] = uint32_t(lo) | uint32_t(hi) << 16;
        }
        *reinterpret_cast<uint4*>(static_cast<uint16_t*>(c.dst) + i) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  }
  for (; i < c.count; ++i) {
    const float v = draw<kUniform>(rng, offset, scale);
    if constexpr (D == DType::kF32) static_cast<float*>(c.dst)[i] = v;
    else static_cast<uint16_t*>(c.dst)[i] = D == DType::kBF16 ? bf16_bits(v) : f16_bits(v);
  }
}

template <bool kUniform>
__device__ void fill_any(const SynthChunk& c) {
  switch (c.dtype) {
    case DType::kBF16: fill<DType::kBF16, kUniform>(c); break;
    case DType::kF16: fill<DType::kF16, kUniform>(c); break;
    default: fill<DType::kF32, kUniform>(c); break;
  }
}

__global__ void synth_fill_kernel(const SynthChunk* chunks, int64_t n) {
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const SynthChunk c = chunks[k];
  if (c.values == SynthValues::kUniform) fill_any<true>(c);
  else fill_any<false>(c);
}

}  // namespace

void synth_fill(const SynthChunk* chunks, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  // 64 threads a block: ~33k chunks of a full-size model spread over every SM.
  constexpr int kThreads = 64;
  SynthChunk* table = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&table, size_t(n) * sizeof(SynthChunk)));
  try {
    WEFT_CUDA_CHECK(cudaMemcpyAsync(table, chunks, size_t(n) * sizeof(SynthChunk), cudaMemcpyHostToDevice, stream));
    synth_fill_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(table, n);
    WEFT_CUDA_LAUNCHED();
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    cudaFree(table);
    throw;
  }
  WEFT_CUDA_CHECK(cudaFree(table));
}

}  // namespace weft::cuda
