// Row conversions between f32 and the 16-bit float formats (f16, bf16), exact in both paths.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace weft {

// dst[i] = src[i] as f32 for i < n; src_type is kF32, kF16 or kBF16 (widening is exact).
void convert_row_to_f32(DType src_type, const void* src, float* dst, int64_t n);
// Round to nearest even; the same bits as weft::f32_to_f16 element by element.
void convert_row_f32_to_f16(const float* src, uint16_t* dst, int64_t n);
// Round to nearest even; the same bits as weft::f32_to_bf16 element by element.
void convert_row_f32_to_bf16(const float* src, uint16_t* dst, int64_t n);

// The two implementations behind the dispatchers above (exposed for tests). The _avx2 ones need
// cpu_features().has_avx2_fma_f16c().
void convert_row_to_f32_scalar(DType src_type, const void* src, float* dst, int64_t n);
void convert_row_f32_to_f16_scalar(const float* src, uint16_t* dst, int64_t n);
void convert_row_f32_to_bf16_scalar(const float* src, uint16_t* dst, int64_t n);
void convert_row_to_f32_avx2(DType src_type, const void* src, float* dst, int64_t n);
void convert_row_f32_to_f16_avx2(const float* src, uint16_t* dst, int64_t n);
void convert_row_f32_to_bf16_avx2(const float* src, uint16_t* dst, int64_t n);

}  // namespace weft
