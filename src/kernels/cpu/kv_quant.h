// Encoding and decoding of one KV-cache row (head_dim values) in each cache element type.
//
// q8_0: blocks of 32 values: f16 scale d = max|x| / 127, then 32 int8 q = round(x / d);
//       x ≈ q·d. 34 bytes per block = 8.5 bits per value.
// q4_0: blocks of 32 values: f16 scale d = m / -8 where m is the value of largest magnitude
//       (sign kept), then 16 bytes: byte j holds q[j] in its low nibble and q[j+16] in its high
//       nibble, q = clamp(round(x / d) + 8, 0, 15); x ≈ (q − 8)·d. 18 bytes = 4.5 bits per value.
// These run once per appended token (never on the attention hot path), so plain scalar code.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace weft {

struct BlockQ8_0 {
  uint16_t d;      // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;      // f16 scale
  uint8_t qs[16];  // low nibble: element j, high nibble: element j + 16
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18, "packed block layout");

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);

// Encodes n f32 values into a row of `type` (f32, f16, q8_0, q4_0).
void encode_kv_row(DType type, const float* src, uint8_t* dst, int64_t n);
// Decodes a row back to f32.
void decode_kv_row(DType type, const uint8_t* src, float* dst, int64_t n);

}  // namespace weft
