// Device helpers shared by the attention and KV-append kernels (src/kernels/cuda/attention*.cu,
// kv_append.cu): f16 bit conversions that match src/core/dtype.cpp exactly, the block formats
// of src/kernels/cpu/kv_quant.h, page-table addressing (kv_view.h) and the softmax-state fold.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/dtype.h"

namespace weft::cuda::detail {

// Throws with the CUDA error string: launch failures are bugs or a lost device, never silent.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

// Element types as small integers in kernel parameters.
enum KvType : int { kKvF32 = 0, kKvF16 = 1, kKvQ8 = 2, kKvQ4 = 3, kKvOther = -1 };
inline KvType kv_type_of(DType t) {
  switch (t) {
    case DType::kF32: return kKvF32;
    case DType::kF16: return kKvF16;
    case DType::kQ8_0: return kKvQ8;
    case DType::kQ4_0: return kKvQ4;
    default: return kKvOther;
  }
}

// f16 bits -> f32, exact (same as weft::f16_to_f32).
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// f32 -> f16 bits with the rounding and special cases of weft::f32_to_f16 (round to nearest
// even, overflow to inf, NaN to the canonical 0x7e00 with the sign kept), so a GPU-appended
// cache holds the bytes the CPU would write.
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return sign | 0x7e00;
  return __half_as_ushort(__float2half_rn(f));  // RNE, overflow -> inf, subnormals: as dtype.cpp
}

// The raw K or V row of (head, pos) in a page table (kv_view.h layout). `v` picks the V half.
__device__ __forceinline__ const uint8_t* kv_row_ptr(const uint8_t* const* pages, int64_t page_tokens,
                                                     int64_t n_kv, size_t k_row_bytes, size_t row_bytes,
                                                     bool v, int64_t head, int64_t pos) {
  const uint8_t* page = pages[pos / page_tokens];
  const size_t base = v ? size_t(n_kv * page_tokens) * k_row_bytes : 0;
  return page + base + size_t(head * page_tokens + pos % page_tokens) * row_bytes;
}

// Element j of a row of type t (f32, f16, q8_0, q4_0), decoded to f32 as kv_quant.cpp does.
__device__ __forceinline__ float kv_load(int t, const uint8_t* row, int64_t j) {
  switch (t) {
    case kKvF32: return reinterpret_cast<const float*>(row)[j];
    case kKvF16: return f16_bits_to_f32(reinterpret_cast<const uint16_t*>(row)[j]);
    case kKvQ8: {
      const uint8_t* b = row + (j / 32) * 34;
      const float d = f16_bits_to_f32(uint16_t(b[0] | b[1] << 8));
      return float(int8_t(b[2 + j % 32])) * d;
    }
    default: {  // q4_0
      const uint8_t* b = row + (j / 32) * 18;
      const float d = f16_bits_to_f32(uint16_t(b[0] | b[1] << 8));
      const int e = int(j % 32);
      const int q = e < 16 ? (b[2 + e] & 0x0f) : (b[2 + e - 16] >> 4);
      return float(q - 8) * d;
    }
  }
}

// Splits per group of the fixed two-level fold: a row's split partials are folded left to right
// inside groups of kFoldGroup consecutive splits, then the groups left to right (the merge kernel
// and the in-block fold of prefill calls both do exactly this).
constexpr int kFoldGroup = 16;

// Folds a split's softmax state (m2, l2, acc2) into the running one (m1, l1, acc1), as the CPU's
// merge_into does. Explicit roundings (no contraction freedom), so every kernel that folds
// computes the same bits.
__device__ __forceinline__ void fold_scales(float m1, float m2, float* m, float* a, float* b) {
  *m = fmaxf(m1, m2);
  *a = expf(m1 - *m);
  *b = expf(m2 - *m);
}
__device__ __forceinline__ float fold_value(float x1, float a, float x2, float b) {
  return __fadd_rn(__fmul_rn(x1, a), __fmul_rn(x2, b));
}

}  // namespace weft::cuda::detail
