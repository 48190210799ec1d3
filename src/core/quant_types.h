// Block-type descriptors of the GGML tensor types weft reads and writes (GGUF weights and the
// 8-bit activation blocks of the quantized matmul): values per block, bytes per block, and the
// byte size of a row. Ids are ggml's `enum ggml_type` values, so they are also GGUF's on-disk ids.
//
// A row of a block-quantized type is a whole number of blocks, so its byte size is
// cols / block_size * block_bytes, never cols * element size: no code may assume the latter.
// The byte layouts of each block are documented in docs/formats-gguf.md and defined as structs in
// kernels/cpu/quant_blocks.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace weft {

// The values are ggml's type ids (ggml.h, `enum ggml_type`); do not renumber.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,  // activation type of the k-quant dot products; never a weight in GGUF files
  kBF16 = 30,
};

struct GgmlTypeTraits {
  GgmlType type;
  const char* name;     // ggml's spelling: "f32", "q4_K", ...
  int64_t block_size;   // values per block (1 for plain types)
  size_t block_bytes;   // bytes per block
  bool quantized;       // true for block types
};

// Values per super-block of the k-quants (ggml's QK_K).
constexpr int64_t kQK_K = 256;
// Values per block of q8_0 / q4_0 (ggml's QK8_0 / QK4_0).
constexpr int64_t kQK32 = 32;

// Traits of a type this build knows, or nullptr for any other id (e.g. a newer ggml type read
// from a file). Callers at the input boundary must check for nullptr.
const GgmlTypeTraits* ggml_type_traits(uint32_t id);
const GgmlTypeTraits& ggml_type_traits(GgmlType t);

inline int64_t ggml_block_size(GgmlType t) { return ggml_type_traits(t).block_size; }
inline size_t ggml_block_bytes(GgmlType t) { return ggml_type_traits(t).block_bytes; }
const char* ggml_type_name(GgmlType t);
// ggml's name for any id it defines (including types weft cannot compute with), for messages;
// "unknown" when the id is not a ggml type at all.
const char* ggml_type_name_any(uint32_t id);

// Bytes of one row of `cols` values. Precondition: cols >= 0 and cols % block_size == 0 (the
// GGUF reader checks this for every tensor before any kernel sees it).
size_t ggml_row_bytes(GgmlType t, int64_t cols);
// Checked form for the input boundary: nullopt when cols is negative, not a whole number of
// blocks, or the byte count overflows.
std::optional<size_t> ggml_row_bytes_checked(GgmlType t, int64_t cols);

// The DType that names the same storage, for the weight types both enums share (f32, f16, bf16,
// q8_0, q4_0, q4_K, q5_K, q6_K); nullopt for q8_K (activations only) and the integer DTypes.
std::optional<DType> ggml_type_to_dtype(GgmlType t);
std::optional<GgmlType> ggml_type_from_dtype(DType t);

}  // namespace weft
