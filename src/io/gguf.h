// GGUF files (llama.cpp's model format, versions 2 and 3): a validated, memory-mapped reader, an
// in-memory parser (the same checks, for fuzzing and tests) and an atomic writer.
//
// Layout (little-endian; docs/formats-gguf.md has the full picture):
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x (string key | u32 value type | value)          string = u64 length + bytes (no NUL)
//   n_tensors x (string name | u32 n_dims | n_dims x u64 ne | u32 ggml type | u64 offset)
//   zero padding to general.alignment (u32, default 32) | data section
// ne[0] is the fastest-varying dimension (a Linear weight [out, in] has ne = {in, out}); offsets
// are relative to the start of the data section and multiples of the alignment.
//
// Version 1 (u32 counts) is rejected; version 2 and 3 have the same little-endian layout (v3
// only added big-endian files, which cannot be told apart from the header, and are rejected by
// their version field reading as a huge number).
//
// Every claim is checked before a tensor is exposed: magic and version; counts against the bytes
// left (no allocation driven by an absurd count); every string, array and field inside the file;
// known value types; array nesting depth; unique keys and tensor names; general.alignment a u32
// power of two; 1..4 dimensions, each >= 0, element and byte counts that do not overflow; a known
// tensor type whose row (ne[0]) is a whole number of blocks; offsets aligned, data inside the
// file, and no two tensors overlapping.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/quant_types.h"
#include "core/status.h"

namespace weft {

// GGUF metadata value types (gguf.h, `enum gguf_type`); the values are the on-disk ids.
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars keep their on-disk type; integers are held widened (u64 for the
// unsigned types and bool, i64 for the signed ones), floats as double (exact for f32).
struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string str;
  GgufType elem_type = GgufType::kU8;  // arrays: the element type
  std::vector<GgufValue> items;        // arrays: the elements

  static GgufValue u8(uint8_t v) { return uint_of(GgufType::kU8, v); }
  static GgufValue u16(uint16_t v) { return uint_of(GgufType::kU16, v); }
  static GgufValue u32(uint32_t v) { return uint_of(GgufType::kU32, v); }
  static GgufValue u64(uint64_t v) { return uint_of(GgufType::kU64, v); }
  static GgufValue boolean(bool v) { return uint_of(GgufType::kBool, v ? 1 : 0); }
  static GgufValue i8(int8_t v) { return int_of(GgufType::kI8, v); }
  static GgufValue i16(int16_t v) { return int_of(GgufType::kI16, v); }
  static GgufValue i32(int32_t v) { return int_of(GgufType::kI32, v); }
  static GgufValue i64(int64_t v) { return int_of(GgufType::kI64, v); }
  static GgufValue f32(float v) { GgufValue x; x.type = GgufType::kF32; x.f = v; return x; }
  static GgufValue f64(double v) { GgufValue x; x.type = GgufType::kF64; x.f = v; return x; }
  static GgufValue string(std::string v) { GgufValue x; x.type = GgufType::kString; x.str = std::move(v); return x; }
  // An array; every item must have type elem_type.
  static GgufValue array(GgufType elem_type, std::vector<GgufValue> items);
  static GgufValue string_array(const std::vector<std::string>& v);
  static GgufValue i32_array(const std::vector<int32_t>& v);
  static GgufValue f32_array(const std::vector<float>& v);

  bool is_unsigned() const { return type == GgufType::kU8 || type == GgufType::kU16 || type == GgufType::kU32 || type == GgufType::kU64; }
  bool is_signed() const { return type == GgufType::kI8 || type == GgufType::kI16 || type == GgufType::kI32 || type == GgufType::kI64; }
  bool operator==(const GgufValue& o) const;

 private:
  static GgufValue uint_of(GgufType t, uint64_t v) { GgufValue x; x.type = t; x.u = v; return x; }
  static GgufValue int_of(GgufType t, int64_t v) { GgufValue x; x.type = t; x.i = v; return x; }
};

// One tensor of the file: a view into the mapped (or caller's) bytes.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;      // ggml order: ne[0] is the fastest-varying (row length)
  uint64_t offset = 0;          // from the start of the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;

  int64_t numel() const;
  // Row-major shape as safetensors/PyTorch write it: ne reversed ({in, out} -> [out, in]).
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
  int64_t cols() const { return ne.empty() ? 1 : ne[0]; }
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }
  // Bytes of one row (ne[0] values): whole blocks, checked by the reader.
  size_t row_bytes() const { return ggml_row_bytes(type, cols()); }
};

class GgufFile {
 public:
  // Maps and validates a file; errors name the file and what is wrong.
  static Result<GgufFile> open(const std::string& path);
  // Validates bytes already in memory. The tensors point into `data`, which the caller keeps
  // alive and unchanged while the result is used. For fuzzing and tests.
  static Result<GgufFile> parse(const uint8_t* data, size_t size);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // from the start of the file

  // Metadata in file order, and lookup by key (nullptr when absent).
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  // Typed getters: an error naming the key when it is absent or of another type.
  Result<std::string> get_string(const std::string& key) const;
  Result<uint64_t> get_uint(const std::string& key) const;        // any unsigned integer type
  Result<std::vector<std::string>> get_string_array(const std::string& key) const;

  // Tensors in file order, and lookup by name (nullptr when absent).
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;

 private:
  static Status parse_into(const uint8_t* data, size_t size, GgufFile* f);

  MappedFile file_;  // empty for parse()
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Limits the reader enforces beyond "fits in the file".
constexpr uint32_t kGgufMaxDims = 4;          // GGML_MAX_DIMS
constexpr size_t kGgufMaxNameBytes = 63;      // GGML_MAX_NAME - 1: llama.cpp's limit on names
constexpr int kGgufMaxArrayDepth = 4;         // arrays of arrays of ...
constexpr uint32_t kGgufDefaultAlignment = 32;

// One tensor to write; data holds ggml_row_bytes(type, ne[0]) * (ne[1] * ne[2] * ne[3]) bytes.
struct GgufTensorToWrite {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // ggml order (ne[0] fastest), 1..4 dims
  const void* data = nullptr;
};

// Serializes a version-3 GGUF file: metadata in the given order, tensor infos, each tensor's
// data at the next multiple of the alignment (general.alignment when the metadata sets it, a
// u32 power of two; otherwise 32), zero padding in between and after the last tensor, which is
// how llama.cpp's gguf writer lays files out (its reader requires that order). Checks names
// (unique, <= 63 bytes), dims and row sizes first.
Result<std::string> serialize_gguf(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                                   const std::vector<GgufTensorToWrite>& tensors);
// Writes serialize_gguf's bytes atomically (path + ".tmp", then rename), streaming tensor data
// rather than building the whole file in memory.
Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                  const std::vector<GgufTensorToWrite>& tensors);

}  // namespace weft
