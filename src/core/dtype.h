// Element types of tensors and caches, and the scalar conversions between them.
// f16 <-> f32 uses F16C when the caller is compiled with it; the portable versions here are the
// reference and are exact (round-to-nearest-even), so both give bit-identical results.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace weft {

// kQ8_0 .. kQ6_K are GGML block types (docs/formats-gguf.md): a row of n values takes
// n / dtype_block(t) * dtype_size(t) bytes, never n * an element size.
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kI8, kU8, kBool, kF64, kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K };

// Bytes per element for plain types; for block-quantized types, bytes per block (see block_size).
size_t dtype_size(DType t);
// Elements per block: 1 for plain types, 32 for q8_0/q4_0, 256 for the k-quants.
int dtype_block(DType t);
inline bool dtype_is_block_quant(DType t) { return dtype_block(t) > 1; }
const char* dtype_name(DType t);
// Parses the safetensors spelling ("F32", "BF16", ...). Returns false when unknown.
bool dtype_from_safetensors(std::string_view s, DType* out);
const char* dtype_safetensors_name(DType t);
// Bytes needed for n elements (n must be a multiple of the block for quantized types).
inline size_t dtype_bytes(DType t, size_t n) { return n / dtype_block(t) * dtype_size(t); }

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace weft
