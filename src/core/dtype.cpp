// Element-type tables and exact scalar f16 conversions (the reference for the F16C paths).
#include "core/dtype.h"

#include <cmath>

namespace weft {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
    case DType::kF64: return 8;
    case DType::kQ8_0: return 34;  // f16 scale + 32 int8
    case DType::kQ4_0: return 18;  // f16 scale + 16 bytes of nibbles
    case DType::kQ4_K: return 144;
    case DType::kQ5_K: return 176;
    case DType::kQ6_K: return 210;
  }
  return 0;
}

int dtype_block(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0: return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return 256;
    default: return 1;
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
    case DType::kF64: return "f64";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_K: return "q4_K";
    case DType::kQ5_K: return "q5_K";
    case DType::kQ6_K: return "q6_K";
  }
  return "?";
}

namespace {
struct NameMap { const char* name; DType type; };
constexpr NameMap kSafetensorsNames[] = {
    {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}, {"I32", DType::kI32},
    {"I64", DType::kI64}, {"I8", DType::kI8},   {"U8", DType::kU8},     {"BOOL", DType::kBool},
    {"F64", DType::kF64},
};
}  // namespace

bool dtype_from_safetensors(std::string_view s, DType* out) {
  for (const auto& m : kSafetensorsNames) {
    if (s == m.name) { *out = m.type; return true; }
  }
  return false;
}

const char* dtype_safetensors_name(DType t) {
  for (const auto& m : kSafetensorsNames) {
    if (m.type == t) return m.name;
  }
  return nullptr;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400) == 0);
      mant &= 0x3ff;
      bits = sign | uint32_t(127 - 15 - e) << 23 | mant << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;            // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00;           // overflow (incl. rounding up) -> inf
  if (abs < 0x38800000u) {                                // subnormal or zero in f16
    if (abs < 0x33000000u) return sign;                   // below half the smallest subnormal
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffff) | 0x800000;
    // value = mant * 2^(exp-150) and the f16 subnormal unit is 2^-24: shift by 126 - exp (14..24).
    uint32_t sh = 126 - exp;
    uint32_t q = mant >> sh;
    uint32_t rem = mant & ((1u << sh) - 1);
    uint32_t half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return sign | uint16_t(q);
  }
  uint32_t exp = (abs >> 23) - 127 + 15;
  uint32_t mant = abs & 0x7fffff;
  uint32_t q = exp << 10 | mant >> 13;
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) ++q;  // may carry into exponent: correct
  return sign | uint16_t(q);
}

}  // namespace weft
