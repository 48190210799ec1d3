// Vector primitives of the strict f16 attention kernel: a scalar set (attention_f16.cpp) and an
// AVX2 set (attention_f16_avx2.cpp) with the same summation order. Chosen once per process.
#pragma once

#include <cstdint>

namespace weft {

struct AttnF16Ops {
  void (*load_row)(const uint16_t* src, float* dst, int64_t n);  // f16 -> f32
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float alpha, const float* x, float* y, int64_t n);  // y += alpha * x
};

const AttnF16Ops& attn_f16_ops_avx2();

}  // namespace weft
