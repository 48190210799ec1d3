// The weight types the CUDA kernels take, in one place: one weight of a device-layout row
// (weight_at: the element-wise paths and the embedding) and the one switch from a run-time type to
// a compile-time one (with_weight_type: every launcher), so adding a type is one case here plus
// its loaders (matmul.cu) and layout (weight_layout.cuh).
#pragma once

#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/weight_layout.cuh"

namespace weft::cuda {

// The block-quantized types (weight_layout.cuh), as a compile-time test.
template <DType D>
inline constexpr bool dtype_is_block_quant_v =
    D == DType::kQ8_0 || D == DType::kQ4_0 || D == DType::kQ4_K || D == DType::kQ5_K || D == DType::kQ6_K;

// Weight k of a row of K weights (K locates the block types' scales: weight_layout.cuh).
template <DType D>
__device__ __forceinline__ float weight_at(const uint8_t* row, int64_t K, int64_t k) {
  if constexpr (D == DType::kF32) return reinterpret_cast<const float*>(row)[k];
  else if constexpr (D == DType::kF16) return f16_bits_to_f32(reinterpret_cast<const uint16_t*>(row)[k]);
  else if constexpr (D == DType::kBF16) return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(row)[k]);
  else if constexpr (D == DType::kQ8_0) return float(int8_t(row[k])) * f16_bits_to_f32(q8_0_scale_bits(row, K, k));
  else if constexpr (D == DType::kQ4_0)
    return float(int((row[k / 2] >> (4 * (k % 2))) & 0xF) - 8) * f16_bits_to_f32(q4_0_scale_bits(row, K, k));
  else if constexpr (D == DType::kQ4_K) return q4_k_weight(row, K, k);
  else if constexpr (D == DType::kQ5_K) return q5_k_weight(row, K, k);
  else if constexpr (D == DType::kQ6_K) return q6_k_weight(row, K, k);
  else static_assert(D == DType::kF32, "not a CUDA weight type");
}

// Whether the kernels take weights of type t.
inline bool is_cuda_weight_type(DType t) {
  switch (t) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ8_0: case DType::kQ4_0:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: return true;
    default: return false;
  }
}

// Calls f(std::integral_constant<DType, D>{}) for the compile-time twin D of t; for a type the
// kernels do not take, reports "`what`: weight type T not yet on CUDA" through check().
template <class F>
void with_weight_type(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::kF32: f(std::integral_constant<DType, DType::kF32>{}); return;
    case DType::kF16: f(std::integral_constant<DType, DType::kF16>{}); return;
    case DType::kBF16: f(std::integral_constant<DType, DType::kBF16>{}); return;
    case DType::kQ8_0: f(std::integral_constant<DType, DType::kQ8_0>{}); return;
    case DType::kQ4_0: f(std::integral_constant<DType, DType::kQ4_0>{}); return;
    case DType::kQ4_K: f(std::integral_constant<DType, DType::kQ4_K>{}); return;
    case DType::kQ5_K: f(std::integral_constant<DType, DType::kQ5_K>{}); return;
    case DType::kQ6_K: f(std::integral_constant<DType, DType::kQ6_K>{}); return;
    default: check(cudaErrorInvalidValue, (std::string(what) + ": weight type " + dtype_name(t) + " not yet on CUDA").c_str());
  }
}

}  // namespace weft::cuda
