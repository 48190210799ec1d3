#include "kernels/cpu/kv_quant.h"

#include <cassert>
#include <cmath>
#include <cstring>

#include "kernels/cpu/vec_convert.h"

namespace weft {

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  assert(n % 32 == 0);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    // A block of subnormals has a scale whose inverse overflows to inf, so its products are ±inf
    // or NaN, where lround is unspecified: they encode as 0 (what x86-64's lround gave, so no
    // byte changes there; the GPU's kv_append does the same).
    for (int j = 0; j < 32; ++j) {
      const float v = xb[j] * id;
      y[b].qs[j] = std::isfinite(v) ? int8_t(std::lround(v)) : int8_t(0);
    }
  }
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  assert(n % 32 == 0);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0, m = 0;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(xb[j]) > amax) { amax = std::fabs(xb[j]); m = xb[j]; }
    }
    const float d = m / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      // Non-finite (a block of subnormals, as in q8_0): 0, where int() of it would be undefined.
      const float v0 = std::floor(xb[j] * id + 8.5f), v1 = std::floor(xb[j + 16] * id + 8.5f);
      int q0 = std::isfinite(v0) ? int(v0) : 0;
      int q1 = std::isfinite(v1) ? int(v1) : 0;
      q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
      q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
      y[b].qs[j] = uint8_t(q0 | q1 << 4);
    }
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < 32; ++j) y[b * 32 + j] = float(x[b].qs[j]) * d;
  }
}

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[b * 32 + j] = float((x[b].qs[j] & 0x0f) - 8) * d;
      y[b * 32 + j + 16] = float((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void encode_kv_row(DType type, const float* src, uint8_t* dst, int64_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, size_t(n) * 4); break;
    // F16C where the CPU has it, the same bits as f32_to_f16 (vec_convert.h).
    case DType::kF16: convert_row_f32_to_f16(src, reinterpret_cast<uint16_t*>(dst), n); break;
    case DType::kQ8_0: quantize_row_q8_0(src, reinterpret_cast<BlockQ8_0*>(dst), n); break;
    case DType::kQ4_0: quantize_row_q4_0(src, reinterpret_cast<BlockQ4_0*>(dst), n); break;
    default: assert(false && "unsupported KV type");
  }
}

void decode_kv_row(DType type, const uint8_t* src, float* dst, int64_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, size_t(n) * 4); break;
    case DType::kF16: {
      auto* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      break;
    }
    case DType::kQ8_0: dequantize_row_q8_0(reinterpret_cast<const BlockQ8_0*>(src), dst, n); break;
    case DType::kQ4_0: dequantize_row_q4_0(reinterpret_cast<const BlockQ4_0*>(src), dst, n); break;
    default: assert(false && "unsupported KV type");
  }
}

}  // namespace weft
