// Scalar row conversions f16/bf16 <-> f32 and the run-time dispatch to the AVX2 versions.
#include "kernels/cpu/vec_convert.h"

#include <cstring>

#include "core/check.h"
#include "core/cpu_features.h"

namespace weft {

void convert_row_to_f32_scalar(DType src_type, const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (src_type) {
    case DType::kF32:
      std::memmove(dst, src, size_t(n) * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);  // memcpy: a mapped tensor need not be 2-aligned
        dst[i] = f16_to_f32(h);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    default:
      // Callers check the dtype at binding; zeros here once hid such a bug.
      WEFT_CHECK(false, "convert_row_to_f32: unsupported source dtype");
  }
}

void convert_row_f32_to_f16_scalar(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void convert_row_f32_to_bf16_scalar(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void convert_row_to_f32(DType src_type, const void* src, float* dst, int64_t n) {
  if (use_avx2()) {
    convert_row_to_f32_avx2(src_type, src, dst, n);
  } else {
    convert_row_to_f32_scalar(src_type, src, dst, n);
  }
}

void convert_row_f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  if (use_avx2()) {
    convert_row_f32_to_f16_avx2(src, dst, n);
  } else {
    convert_row_f32_to_f16_scalar(src, dst, n);
  }
}

void convert_row_f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  if (use_avx2()) {
    convert_row_f32_to_bf16_avx2(src, dst, n);
  } else {
    convert_row_f32_to_bf16_scalar(src, dst, n);
  }
}

}  // namespace weft
