// How block-quantized weights sit in GPU memory, and how the product kernels read them.
//
// q8_0 (GGUF: blocks of 32 weights, 34 bytes each, an f16 scale d then 32 int8 quants q; the
// weight is q·d). On the GPU a row of K weights (K % 32 == 0) keeps the same row_bytes (34 K / 32)
// but is repacked at upload (repack_rows) into its K quants in order, then its K / 32 scales:
//
//     [ q[0] q[1] ... q[K-1] | d[0] d[1] ... d[K/32-1] ]
//
// so the 8 quants of a lane's group (the products' unit: 8 consecutive columns, see matmul.cuh) are
// one aligned 8-byte load, where GGUF's 34-byte blocks only allow 2-byte ones. Same bytes moved,
// same size, so every host-side address of a matrix (row slices of fused tensors, tied embeddings)
// maps to the device as before. A weight is float(q) · float(d): exact in f32 (8 x 11 significant
// bits), so a product over q8_0 weights is the product over the dequantized f32 matrix, in the
// kernels' per-element order.
//
// q4_0 (GGUF: blocks of 32 weights, 18 bytes: an f16 scale d, then 16 bytes whose low nibbles are
// weights 0..15 and high nibbles 16..31; the weight is (nibble - 8)·d). On the GPU a row keeps
// its 18 K / 32 bytes, repacked into its weights' nibbles in order, two per
// byte, low nibble first (a group of 8 is one aligned 4-byte word), then its K / 32 scales:
//
//     [ n[0] | n[1]<<4, n[2] | n[3]<<4, ... | d[0] d[1] ... d[K/32-1] ]
//
// A weight is float(nibble - 8) · float(d): exact in f32 (4 x 11 significant bits).
//
// q4_K (GGUF: super-blocks of 256 weights, 144 bytes: f16 d and dmin, 12 bytes of packed 6-bit
// sub-block scales and mins, 128 bytes of nibbles in 64-weight chunks: low nibbles the chunk's
// first 32 weights, high nibbles its last 32). On the GPU (K % 256 == 0, same row size): the
// nibbles in weight order, two per byte, low first (like q4_0), then each super-block's first 16
// bytes (d, dmin, scales) as they are. Weight k of sub-block j = (k % 256) / 32:
// d·sc[j] · n - dmin·m[j], as dequantize_row_q4_K (d·sc[j] · n is exact, so one rounding).
//
// q5_K (GGUF: super-blocks of 256 weights, 176 bytes: q4_K's d, dmin and 12 scale bytes, then 32
// bytes of fifth bits qh (weight 64c + l of chunk c: bit 2c of qh[l], weight 64c + 32 + l: bit
// 2c + 1), then q4_K's 128 bytes of nibbles). On the GPU (K % 256 == 0, same row size): the nibbles
// in weight order (like q4_K), the fifth bits in weight order (weight k: bit k % 8 of byte k / 8,
// so a group of 8 is one byte), then each super-block's first 16 bytes as they are. Weight k:
// d·sc[j] · (n + 16 b) - dmin·m[j], as dequantize_row_q5_K (d·sc[j] · q exact: 17 + 5 bits).
//
// q6_K (GGUF: 210 bytes per 256: low nibbles ql, high 2-bit pairs qh, 16 int8 sub-block scales,
// f16 d). On the GPU: the low nibbles in weight order (K / 2 bytes), the high pairs in weight order,
// four per byte, lowest bits first (K / 4 bytes), then per super-block its 16 scales and d (18
// bytes). Weight k: d·sc[(k % 256) / 16] · (q - 32), q = low | high << 4 (d·sc exact).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

namespace weft::cuda {

// Host: rows x K weights of block type t (q8_0, q4_0, q4_K, q5_K, q6_K) from GGUF's blocks (src,
// rows · dtype_bytes(t, K) bytes) into the device layout above (dst, same size; dst != src).
// Throws std::invalid_argument for another type or a K that is not a multiple of the block.
void repack_rows(DType t, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t K);
// Host: weight k of a device-layout row of type t and K weights (tests read the layout back).
float device_weight(DType t, const uint8_t* row, int64_t K, int64_t k);

#ifdef __CUDACC__
// Device: the scale of weight k's block in a device-layout row of K weights.
__device__ __forceinline__ uint16_t q8_0_scale_bits(const uint8_t* row, int64_t K, int64_t k) {
  return reinterpret_cast<const uint16_t*>(row + K)[k / 32];
}
// Device: the 4 weights of quant bytes `word` (little-endian) times the scale d. The int8 -> f32
// conversion without I2F (a quarter-rate instruction, which at the H200's ~16 weight bytes per
// SM clock would be the limit): byte q + 128 becomes the low mantissa byte of 2^23 (one byte
// permute), and subtracting 2^23 + 128 leaves q exactly.
__device__ __forceinline__ void q8_0_unpack4(uint32_t word, float d, float* out) {
  const uint32_t biased = word ^ 0x80808080u;  // q + 128 in each byte
#pragma unroll
  for (int i = 0; i < 4; ++i)
    out[i] = (__uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u | unsigned(i))) - 8388736.0f) * d;
}
// Device: the scale of weight k's block in a q4_0 device-layout row (it starts at K / 2).
__device__ __forceinline__ uint16_t q4_0_scale_bits(const uint8_t* row, int64_t K, int64_t k) {
  return reinterpret_cast<const uint16_t*>(row + K / 2)[k / 32];
}
// Device: byte i of b as the float 2^23 + b_i, exactly: one byte permute puts b_i in the low
// mantissa byte of 2^23 (no I2F, no per-weight shift and mask). The 4- to 6-bit types below first
// gather their weights' codes into bytes, even weights (0, 2, 4, 6 of a group) in one word and odd
// ones in another, a few word-wide operations per 4 weights instead of a shift and masks per
// weight; every weight is the same exact float as before, so the products keep their bits.
__device__ __forceinline__ float byte_plus_2p23(uint32_t b, int i) {
  return __uint_as_float(__byte_perm(b, 0x4B000000u, 0x7440u | unsigned(i)));
}
// Device: the 8 weights of nibble word `word` (weight i in bits 4i..4i+3) times the scale d,
// without I2F: nibble n becomes the low mantissa bits of 2^23, and subtracting 2^23 + 8 leaves
// n - 8 exactly.
__device__ __forceinline__ void q4_0_unpack8(uint32_t word, float d, float* out) {
  const uint32_t even = word & 0x0F0F0F0Fu, odd = (word >> 4) & 0x0F0F0F0Fu;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = (byte_plus_2p23(even, i) - 8388616.0f) * d;
    out[2 * i + 1] = (byte_plus_2p23(odd, i) - 8388616.0f) * d;
  }
}
// Device: sub-block j's 6-bit scale and min from a q4_K super-block's 12 scale bytes, held in the
// words s0 (bytes 0-3), s1 (4-7), s2 (8-11) (unpack_scales_k4's arithmetic).
__device__ __forceinline__ void q4_k_scale_min(uint32_t s0, uint32_t s1, uint32_t s2, int j, uint32_t* sc,
                                               uint32_t* m) {
  const int i = j & 3, sh = 8 * i;
  const uint32_t a = (s0 >> sh) & 0xFF, b = (s1 >> sh) & 0xFF, c = (s2 >> sh) & 0xFF;
  if (j < 4) *sc = a & 63, *m = b & 63;
  else *sc = (c & 0xF) | ((a >> 6) << 4), *m = (c >> 4) | ((b >> 6) << 4);
}
// Device: the 8 weights of nibble word `word` of a q4_K group in sub-block j, its super-block's
// header h (x: d | dmin << 16; y, z, w: the 12 scale bytes).
__device__ __forceinline__ void q4_k_unpack8(uint32_t word, uint4 h, int j, float* out) {
  uint32_t sc, m;
  q4_k_scale_min(h.y, h.z, h.w, j, &sc, &m);
  const float d1 = __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFF))) * float(sc);
  const float m1 = __half2float(__ushort_as_half(uint16_t(h.x >> 16))) * float(m);
  const uint32_t even = word & 0x0F0F0F0Fu, odd = (word >> 4) & 0x0F0F0F0Fu;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = fmaf(d1, byte_plus_2p23(even, i) - 8388608.0f, -m1);
    out[2 * i + 1] = fmaf(d1, byte_plus_2p23(odd, i) - 8388608.0f, -m1);
  }
}
// Device: the 8 weights of a q5_K group: nibble word `word`, fifth bits `high` (bit i: weight i),
// in sub-block j of the super-block whose header is h (as q4_k_unpack8's).
__device__ __forceinline__ void q5_k_unpack8(uint32_t word, uint32_t high, uint4 h, int j, float* out) {
  uint32_t sc, m;
  q4_k_scale_min(h.y, h.z, h.w, j, &sc, &m);
  const float d1 = __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFF))) * float(sc);
  const float m1 = __half2float(__ushort_as_half(uint16_t(h.x >> 16))) * float(m);
  // The fifth bits of weights 0, 2, 4, 6 (bits 0, 2, 4, 6 of high) to bit 4 of bytes 0-3: the
  // multiply shifts bit 2k by 6k to 8k (the other products land on bits 2k + 6m, k != m, which
  // never reach a bit 8j; where two meet, the carry goes to an odd bit the mask drops).
  const uint32_t even = (word & 0x0F0F0F0Fu) | (((high & 0x55u) * 0x41041u) & 0x01010101u) << 4;
  const uint32_t odd = ((word >> 4) & 0x0F0F0F0Fu) | ((((high >> 1) & 0x55u) * 0x41041u) & 0x01010101u) << 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = fmaf(d1, byte_plus_2p23(even, i) - 8388608.0f, -m1);
    out[2 * i + 1] = fmaf(d1, byte_plus_2p23(odd, i) - 8388608.0f, -m1);
  }
}
// Device: the 16-byte header (d, dmin, scales) of weight k's super-block in a q5_K row.
__device__ __forceinline__ const uint8_t* q5_k_header(const uint8_t* row, int64_t K, int64_t k) {
  return row + K / 2 + K / 8 + 16 * (k / 256);
}
// Device: the 8 weights of a q6_K group: low nibbles `lo`, high pairs `hi` (16 bits), its
// sub-block's scale sc and the super-block's d.
__device__ __forceinline__ void q6_k_unpack8(uint32_t lo, uint32_t hi, int sc, float d, float* out) {
  const float ds = d * float(sc);
  // The high pairs of weights 0, 2, 4, 6 (bits 4k, 4k + 1 of hi) to bits 4-5 of bytes 0-3 in two
  // moves (fields at 8 and 12 up by 8, then those at 4 and 20 up by 4, the 4-bit lift folded in).
  const auto lift = [](uint32_t x) {  // x: 2-bit fields at bits 0, 4, 8, 12
    const uint32_t a = (x & 0x33u) | ((x << 8) & 0x330000u);
    return ((a & 0x00030003u) << 4) | ((a << 8) & 0x30003000u);
  };
  const uint32_t even = (lo & 0x0F0F0F0Fu) | lift(hi & 0x3333u);
  const uint32_t odd = ((lo >> 4) & 0x0F0F0F0Fu) | lift((hi >> 2) & 0x3333u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = ds * (byte_plus_2p23(even, i) - 8388640.0f);
    out[2 * i + 1] = ds * (byte_plus_2p23(odd, i) - 8388640.0f);
  }
}
// Device: the 18-byte header (16 int8 scales, f16 d) of weight k's super-block in a q6_K row.
__device__ __forceinline__ const uint8_t* q6_k_header(const uint8_t* row, int64_t K, int64_t k) {
  return row + K / 2 + K / 4 + 18 * (k / 256);
}
// Device: a q4_K / q5_K super-block header read byte by byte (the element-wise paths' rows need
// not be 16-byte aligned).
__device__ __forceinline__ uint4 k_header_bytes(const uint8_t* hp) {
  uint4 h;
  h.x = uint32_t(hp[0]) | uint32_t(hp[1]) << 8 | uint32_t(hp[2]) << 16 | uint32_t(hp[3]) << 24;
  h.y = uint32_t(hp[4]) | uint32_t(hp[5]) << 8 | uint32_t(hp[6]) << 16 | uint32_t(hp[7]) << 24;
  h.z = uint32_t(hp[8]) | uint32_t(hp[9]) << 8 | uint32_t(hp[10]) << 16 | uint32_t(hp[11]) << 24;
  h.w = uint32_t(hp[12]) | uint32_t(hp[13]) << 8 | uint32_t(hp[14]) << 16 | uint32_t(hp[15]) << 24;
  return h;
}
// Device: one weight of a q4_K / q5_K / q6_K device-layout row (the element-wise paths, the embedding).
__device__ __forceinline__ float q4_k_weight(const uint8_t* row, int64_t K, int64_t k) {
  float w8[8];
  q4_k_unpack8(uint32_t((row[k / 2] >> (4 * (k % 2))) & 0xF), k_header_bytes(row + K / 2 + 16 * (k / 256)),
               int((k % 256) / 32), w8);
  return w8[0];
}
__device__ __forceinline__ float q5_k_weight(const uint8_t* row, int64_t K, int64_t k) {
  float w8[8];
  q5_k_unpack8(uint32_t((row[k / 2] >> (4 * (k % 2))) & 0xF), uint32_t((row[K / 2 + k / 8] >> (k % 8)) & 1),
               k_header_bytes(q5_k_header(row, K, k)), int((k % 256) / 32), w8);
  return w8[0];
}
__device__ __forceinline__ float q6_k_weight(const uint8_t* row, int64_t K, int64_t k) {
  const uint8_t* h = q6_k_header(row, K, k);
  const uint32_t lo = (row[k / 2] >> (4 * (k % 2))) & 0xF, hi = (row[K / 2 + k / 4] >> (2 * (k % 4))) & 3;
  const uint16_t d = uint16_t(h[16] | h[17] << 8);
  float w8[8];
  q6_k_unpack8(lo, hi, int(int8_t(h[(k % 256) / 16])), __half2float(__ushort_as_half(d)), w8);
  return w8[0];
}
#endif

}  // namespace weft::cuda
