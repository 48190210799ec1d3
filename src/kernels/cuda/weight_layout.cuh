// How block-quantized weights sit in GPU memory, and how the product kernels read them.
//
// q8_0 (GGUF: blocks of 32 weights, 34 bytes each, an f16 scale d then 32 int8 quants q; the
// weight is q·d). On the GPU a row of K weights (K % 32 == 0) keeps the same row_bytes (34 K / 32)
// but is repacked at upload (repack_q8_0_rows) into its K quants in order, then its K / 32 scales:
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
// its 18 K / 32 bytes, repacked (repack_q4_0_rows) into its weights' nibbles in order, two per
// byte, low nibble first (a group of 8 is one aligned 4-byte word), then its K / 32 scales:
//
//     [ n[0] | n[1]<<4, n[2] | n[3]<<4, ... | d[0] d[1] ... d[K/32-1] ]
//
// A weight is float(nibble - 8) · float(d): exact in f32 (4 x 11 significant bits).
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::cuda {

// Host: rows x K weights from GGUF's q8_0 blocks (src, rows · 34 K / 32 bytes) into the device
// layout above (dst, same size; dst != src). K must be a multiple of 32.
void repack_q8_0_rows(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t K);
// Host: weight k of a row in the device layout (tests read it back with this).
float q8_0_device_weight(const uint8_t* row, int64_t K, int64_t k);
// Host: the same for q4_0 (src: rows · 18 K / 32 bytes of GGUF blocks).
void repack_q4_0_rows(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t K);
float q4_0_device_weight(const uint8_t* row, int64_t K, int64_t k);
// Bytes of a device-layout row of a block type (q8_0, q4_0) for K weights: GGUF's row size.
int64_t block_row_bytes(bool q4, int64_t K);

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
// Device: the 8 weights of nibble word `word` (weight i in bits 4i..4i+3) times the scale d,
// without I2F: nibble n becomes the low mantissa bits of 2^23, and subtracting 2^23 + 8 leaves
// n - 8 exactly.
__device__ __forceinline__ void q4_0_unpack8(uint32_t word, float d, float* out) {
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = (__uint_as_float(((word >> (4 * i)) & 0xFu) | 0x4B000000u) - 8388616.0f) * d;
}
#endif

}  // namespace weft::cuda
