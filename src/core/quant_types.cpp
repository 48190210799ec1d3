// The GGML block-type table (sizes from ggml-common.h's block structs; see docs/formats-gguf.md).
#include "core/quant_types.h"

#include <cassert>
#include <limits>

namespace weft {

namespace {

constexpr GgmlTypeTraits kTraits[] = {
    {GgmlType::kF32, "f32", 1, 4, false},
    {GgmlType::kF16, "f16", 1, 2, false},
    {GgmlType::kBF16, "bf16", 1, 2, false},
    {GgmlType::kQ8_0, "q8_0", kQK32, 2 + 32, true},                   // f16 d, 32 x i8
    {GgmlType::kQ4_0, "q4_0", kQK32, 2 + 16, true},                   // f16 d, 16 bytes of nibbles
    {GgmlType::kQ4_K, "q4_K", kQK_K, 2 + 2 + 12 + 128, true},         // d, dmin, scales, nibbles
    {GgmlType::kQ5_K, "q5_K", kQK_K, 2 + 2 + 12 + 32 + 128, true},    // ... + high bits
    {GgmlType::kQ6_K, "q6_K", kQK_K, 128 + 64 + 16 + 2, true},        // ql, qh, i8 scales, d
    {GgmlType::kQ8_K, "q8_K", kQK_K, 4 + 256 + 2 * 16, true},         // f32 d, 256 x i8, 16 x i16 sums
};

// ggml's names for every id of `enum ggml_type` up to 39 (holes are removed types), so that a
// file using a type weft cannot compute with gets a message naming it.
constexpr const char* kAllNames[] = {
    "f32",  "f16",   "q4_0",    "q4_1",    "q4_2(removed)", "q4_3(removed)", "q5_0",  "q5_1",
    "q8_0", "q8_1",  "q2_K",    "q3_K",    "q4_K",          "q5_K",          "q6_K",  "q8_K",
    "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl",     "iq3_s",         "iq2_s", "iq4_xs",
    "i8",   "i16",   "i32",     "i64",     "f64",           "iq1_m",         "bf16",  "q4_0_4_4(removed)",
    "q4_0_4_8(removed)", "q4_0_8_8(removed)", "tq1_0", "tq2_0", "iq4_nl_4_4(removed)",
    "iq4_nl_4_8(removed)", "iq4_nl_8_8(removed)", "mxfp4",
};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t id) {
  for (const auto& t : kTraits) {
    if (uint32_t(t.type) == id) return &t;
  }
  return nullptr;
}

const GgmlTypeTraits& ggml_type_traits(GgmlType t) {
  const GgmlTypeTraits* tr = ggml_type_traits(uint32_t(t));
  assert(tr != nullptr);
  return *tr;
}

const char* ggml_type_name(GgmlType t) { return ggml_type_traits(t).name; }

const char* ggml_type_name_any(uint32_t id) {
  return id < sizeof(kAllNames) / sizeof(kAllNames[0]) ? kAllNames[id] : "unknown";
}

size_t ggml_row_bytes(GgmlType t, int64_t cols) {
  const GgmlTypeTraits& tr = ggml_type_traits(t);
  assert(cols >= 0 && cols % tr.block_size == 0);
  return size_t(cols / tr.block_size) * tr.block_bytes;
}

std::optional<size_t> ggml_row_bytes_checked(GgmlType t, int64_t cols) {
  const GgmlTypeTraits* tr = ggml_type_traits(uint32_t(t));
  if (tr == nullptr || cols < 0 || cols % tr->block_size != 0) return std::nullopt;
  const uint64_t blocks = uint64_t(cols / tr->block_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / tr->block_bytes) return std::nullopt;
  return size_t(blocks * tr->block_bytes);
}

std::optional<DType> ggml_type_to_dtype(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
    case GgmlType::kQ8_0: return DType::kQ8_0;
    case GgmlType::kQ4_0: return DType::kQ4_0;
    case GgmlType::kQ4_K: return DType::kQ4_K;
    case GgmlType::kQ5_K: return DType::kQ5_K;
    case GgmlType::kQ6_K: return DType::kQ6_K;
    default: return std::nullopt;
  }
}

std::optional<GgmlType> ggml_type_from_dtype(DType t) {
  switch (t) {
    case DType::kF32: return GgmlType::kF32;
    case DType::kF16: return GgmlType::kF16;
    case DType::kBF16: return GgmlType::kBF16;
    case DType::kQ8_0: return GgmlType::kQ8_0;
    case DType::kQ4_0: return GgmlType::kQ4_0;
    case DType::kQ4_K: return GgmlType::kQ4_K;
    case DType::kQ5_K: return GgmlType::kQ5_K;
    case DType::kQ6_K: return GgmlType::kQ6_K;
    default: return std::nullopt;
  }
}

}  // namespace weft
