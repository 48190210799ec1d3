// GGML weight blocks: the exact byte layouts (bit-compatible with llama.cpp's GGUF files), and
// reference quantize (f32 -> blocks) and dequantize (blocks -> f32) for every weight type.
//
// Layouts (values are little-endian; f16 is IEEE binary16; docs/formats-gguf.md draws them):
//   q8_0  32 values, 34 B:  f16 d | i8 q[32]                      x = q * d
//   q4_0  32 values, 18 B:  f16 d | u8 qs[16]                     byte j = q[j] | q[j+16] << 4,
//                                                                 x = (q - 8) * d
//   q4_K 256 values, 144 B: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
//         8 sub-blocks of 32 with 6-bit scale sc and 6-bit min m (packing: pack_scales_k4);
//         64-value chunk c (c < 4) is qs[32c .. 32c+32): low nibbles are sub-block 2c, high
//         nibbles sub-block 2c+1, element order kept;  x = d*sc*q - dmin*m,  q in 0..15
//   q5_K 256 values, 176 B: f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
//         as q4_K, plus a fifth bit: bit s of qh[l] is the high bit of element l of sub-block s;
//         x = d*sc*q - dmin*m,  q in 0..31
//   q6_K 256 values, 210 B: u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
//         16 sub-blocks of 16 with a signed 8-bit scale; half h (128 values) uses ql[64h ..+64)
//         and qh[32h ..+32): for l < 32, element 128h + 32i + l has low 4 bits from
//         ql[64h + l + 32(i&1)] (low nibble for i < 2, high nibble for i >= 2) and high 2 bits
//         from bits 2i, 2i+1 of qh[32h + l];  x = d*sc*(q - 32),  q in 0..63
//   q8_K 256 values, 292 B: f32 d | i8 q[256] | i16 bsums[16]    (activations only)
// Sources: llama.cpp ggml/src/ggml-common.h (block structs) and ggml-quants.c
// (dequantize_row_*); the code here is our own.
//
// The quantizers are references for building test data and `weft quantize` files, not a hot
// path: plain scalar code. k-quant scales come from a small least-squares search per sub-block
// (our own; bit-equality with llama.cpp's quantizer is not a goal, decoding identically is).
#pragma once

#include <cstdint>

#include "core/quant_types.h"
#include "kernels/cpu/kv_quant.h"  // BlockQ8_0, BlockQ4_0: the KV cache rows use the same blocks

namespace weft {

struct BlockQ4_K {
  uint16_t d;          // f16 super-block scale of the sub-block scales
  uint16_t dmin;       // f16 super-block scale of the sub-block mins
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min), see pack_scales_k4
  uint8_t qs[128];     // 4-bit quants
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];      // fifth bits
  uint8_t qs[128];     // low 4 bits
};
struct BlockQ6_K {
  uint8_t ql[128];     // low 4 bits
  uint8_t qh[64];      // high 2 bits
  int8_t scales[16];   // signed 8-bit sub-block scales
  uint16_t d;          // f16 super-block scale
};
struct BlockQ8_K {
  float d;             // f32 scale: x = q * d
  int8_t qs[256];
  int16_t bsums[16];   // sum of q over each group of 16 (exact; used for mins and offsets)
};
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 &&
                  sizeof(BlockQ8_K) == 292,
              "GGML block layouts");

// The 12-byte scale/min packing of q4_K and q5_K (llama.cpp's get_scale_min_k4):
//   bytes 0..3:  bits 0-5 = scale i,  bits 6-7 = bits 4-5 of scale i+4     (i < 4)
//   bytes 4..7:  bits 0-5 = min i,    bits 6-7 = bits 4-5 of min i+4
//   bytes 8..11: bits 0-3 = bits 0-3 of scale i+4, bits 4-7 = bits 0-3 of min i+4
inline void unpack_scales_k4(const uint8_t s[12], uint8_t sc[8], uint8_t m[8]) {
  for (int i = 0; i < 4; ++i) {
    sc[i] = s[i] & 63;
    m[i] = s[i + 4] & 63;
    sc[i + 4] = uint8_t((s[i + 8] & 0xF) | ((s[i] >> 6) << 4));
    m[i + 4] = uint8_t((s[i + 8] >> 4) | ((s[i + 4] >> 6) << 4));
  }
}
// Precondition: every sc[i], m[i] < 64.
inline void pack_scales_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t s[12]) {
  for (int i = 0; i < 4; ++i) {
    s[i] = uint8_t(sc[i] | ((sc[i + 4] >> 4) << 6));
    s[i + 4] = uint8_t(m[i] | ((m[i + 4] >> 4) << 6));
    s[i + 8] = uint8_t((sc[i + 4] & 0xF) | ((m[i + 4] & 0xF) << 4));
  }
}

// Quantizes n values (a multiple of the type's block size) into `dst`, which must hold
// ggml_row_bytes(type, n) bytes. All weight types (f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)
// and q8_K. Non-finite inputs give unspecified (but in-range) codes.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);
// Decodes n values of `type` to f32, exactly as llama.cpp's dequantize_row_* computes them.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n);
void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n);
// Activation blocks: d = max|x| / 127, q = round(x / d) clamped to [-127, 127] (never -128, which
// the integer dot products rely on), bsums exact.
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);

// An activation code: v clamped to [-127, 127] (NaN to -127), then rounded half to even (the
// rounding of ggml's activation quantizers). 12582912 = 1.5 * 2^23: adding and subtracting it
// rounds |v| <= 2^22 to an integer in the current (default: nearest-even) rounding mode, with no
// libm call (IEEE arithmetic, which the build never relaxes: no -ffast-math, so the pair is not
// folded); the AVX2 quantizers compute the same codes with _mm256_round_ps.
inline int code_half_even(float v) {
  if (!(v >= -127.0f)) return -127;
  if (v >= 127.0f) return 127;
  const float r = v + 12582912.0f;
  return int(r - 12582912.0f);
}
void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n);

}  // namespace weft
