// Vector primitives of the strict f16 attention kernel: a scalar set (attention_f16.cpp) and an
// AVX2 set (attention_f16_avx2.cpp) with the same summation order. Chosen once per process.
#pragma once

#include <cstdint>

namespace weft {

struct AttnF16Ops {
  void (*load_row)(const uint16_t* src, float* dst, int64_t n);  // f16 -> f32
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float alpha, const float* x, float* y, int64_t n);  // y += alpha * x
  // s[i * s_stride] = dot(q + i * hd, row, hd) * scale for i < group: the same value, bit for
  // bit, as `dot` gives head by head; the fast version shares each load of `row` across heads.
  void (*scores)(const float* q, int64_t group, const float* row, int64_t hd, float scale, float* s,
                 int64_t s_stride);
  // For j < n in order, for i < group: acc[i] += p[i * p_stride + j] * f16_row_j (as `axpy`
  // does, element by element, so the result is bit-identical); rows[j] points at f16 V row j.
  // The fast version keeps accumulators in registers across rows and widens each row once.
  void (*accumulate_v)(const uint16_t* const* rows, int64_t n, const float* p, int64_t p_stride,
                       int64_t group, int64_t hd, float* acc);
};

const AttnF16Ops& attn_f16_ops_avx2();

}  // namespace weft
