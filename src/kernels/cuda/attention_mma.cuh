// Device helpers of the tiled attention kernels (attention_split.cu, attention_qkeys.cu): the PTX
// wrappers (cp.async, ldmatrix, movmatrix, mma.m16n8k16) and the integer tricks that turn
// q8_0 / q4_0 bytes into scaled f16 pairs. Inline device functions only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace weft::cuda::detail {

// ---- PTX helpers ----

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; src_bytes = 0 writes zeros (rows past the keys).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait(int pending) {
  switch (pending) {  // the operand must be an immediate
    case 0: asm volatile("cp.async.wait_group 0;\n" ::); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::); break;
    default: asm volatile("cp.async.wait_group 3;\n" ::); break;
  }
}

// Four 8x8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldsm_x4(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// D += A·B, m16n8k16, f16 inputs, f32 accumulators (PTX fragment layouts).
__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Transposes an 8x8 b16 matrix held one row pair per lane (the MMA accumulator layout).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}

// ---- Dequantization in registers ----
// 0x6400 | b is the f16 1024 + b (b < 256), so integer bytes become exact f16 values with a
// byte permute and one subtraction; the scale is applied with one rounding (__hmul2 rounds the
// exact product, as __float2half_rn(float(q) * d) does).

__device__ __forceinline__ __half2 u32_as_half2(uint32_t x) { return *reinterpret_cast<__half2*>(&x); }
__device__ __forceinline__ uint32_t half2_as_u32(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }

// Bytes 0,1 (sel 0x4140) or 2,3 (sel 0x4342) of u as f16 (1024 + byte), minus `bias`, times d.
__device__ __forceinline__ uint32_t bytes_to_half2(uint32_t u, uint32_t sel, __half2 bias, __half2 d) {
  return half2_as_u32(__hmul2(__hsub2(u32_as_half2(__byte_perm(u, 0x64646464u, sel)), bias), d));
}

// 4 q4_0 bytes (one word) -> elements j..j+3 (low nibbles) and j+16..j+19 (high), scaled.
__device__ __forceinline__ void q4_word(uint32_t w, __half2 d, uint32_t* lo, uint32_t* hi) {
  const __half2 bias = __float2half2_rn(1032.0f);  // 1024 + 8
  const uint32_t l = w & 0x0f0f0f0fu, h = (w >> 4) & 0x0f0f0f0fu;
  lo[0] = bytes_to_half2(l, 0x4140, bias, d);
  lo[1] = bytes_to_half2(l, 0x4342, bias, d);
  hi[0] = bytes_to_half2(h, 0x4140, bias, d);
  hi[1] = bytes_to_half2(h, 0x4342, bias, d);
}

__device__ __forceinline__ __half2 scale_half2(uint32_t bits16) {
  const __half d = __ushort_as_half(uint16_t(bits16));
  return __halves2half2(d, d);
}

}  // namespace weft::cuda::detail
