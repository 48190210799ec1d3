// GGUF reader and writer; see gguf.h for the layout and the checks the reader makes.
#include "io/gguf.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

namespace weft {

namespace {

constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr size_t kMaxKeyBytes = 65535;  // the GGUF spec's limit on key length
// Total array elements over all metadata. Real vocabularies hold ~1M (tokens, scores, types,
// merges); the cap bounds the memory a hostile file can make the reader allocate, since every
// element becomes a GgufValue (~100 bytes) while it may occupy a single byte of the file.
constexpr uint64_t kMaxArrayElements = uint64_t(4) << 20;

bool valid_value_type(uint32_t t) { return t <= uint32_t(GgufType::kF64); }

// Bytes a value of type t occupies at least (strings: the length field; arrays: type + count).
size_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

// A bounds-checked little-endian reader over [data, data + size). Every read either succeeds
// entirely inside the buffer or fails with a message saying what was being read.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  Status bytes(size_t n, const uint8_t** out, const std::string& what) {
    if (n > remaining())
      return Status::error("truncated: " + what + " needs " + std::to_string(n) + " bytes at offset " +
                           std::to_string(pos_) + ", " + std::to_string(remaining()) + " left");
    *out = data_ + pos_;
    pos_ += n;
    return Status();
  }
  template <typename T>
  Status scalar(T* out, const std::string& what) {
    const uint8_t* p;
    WEFT_RETURN_IF_ERROR(bytes(sizeof(T), &p, what));
    std::memcpy(out, p, sizeof(T));  // the file is little-endian, as is every target of weft
    return Status();
  }
  Status string(std::string* out, size_t max_len, const std::string& what) {
    uint64_t len;
    WEFT_RETURN_IF_ERROR(scalar(&len, what + " length"));
    if (len > max_len) return Status::error(what + " is " + std::to_string(len) + " bytes long (limit " + std::to_string(max_len) + ")");
    const uint8_t* p;
    WEFT_RETURN_IF_ERROR(bytes(size_t(len), &p, what));
    out->assign(reinterpret_cast<const char*>(p), size_t(len));
    return Status();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

struct ParseState {
  uint64_t array_elements = 0;
};

Status read_value(Cursor& c, GgufType type, int depth, ParseState& st, GgufValue* out, const std::string& what) {
  out->type = type;
  switch (type) {
    case GgufType::kU8: { uint8_t v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->u = v; return Status(); }
    case GgufType::kU16: { uint16_t v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->u = v; return Status(); }
    case GgufType::kU32: { uint32_t v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->u = v; return Status(); }
    case GgufType::kU64: { uint64_t v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->u = v; return Status(); }
    case GgufType::kI8: { int8_t v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->i = v; return Status(); }
    case GgufType::kI16: { int16_t v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->i = v; return Status(); }
    case GgufType::kI32: { int32_t v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->i = v; return Status(); }
    case GgufType::kI64: { int64_t v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->i = v; return Status(); }
    case GgufType::kF32: { float v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->f = v; return Status(); }
    case GgufType::kF64: { double v; WEFT_RETURN_IF_ERROR(c.scalar(&v, what)); out->f = v; return Status(); }
    case GgufType::kBool: {
      uint8_t v;
      WEFT_RETURN_IF_ERROR(c.scalar(&v, what));
      if (v > 1) return Status::error(what + ": bool value " + std::to_string(v) + " is neither 0 nor 1");
      out->u = v;
      return Status();
    }
    case GgufType::kString: return c.string(&out->str, c.remaining(), what);
    case GgufType::kArray: {
      uint32_t et;
      uint64_t n;
      WEFT_RETURN_IF_ERROR(c.scalar(&et, what + " element type"));
      if (!valid_value_type(et)) return Status::error(what + ": unknown array element type " + std::to_string(et));
      WEFT_RETURN_IF_ERROR(c.scalar(&n, what + " element count"));
      out->elem_type = GgufType(et);
      if (out->elem_type == GgufType::kArray && depth + 1 >= kGgufMaxArrayDepth)
        return Status::error(what + ": arrays nested deeper than " + std::to_string(kGgufMaxArrayDepth));
      // Each element takes at least min_value_bytes, so a count beyond what is left is a lie;
      // checking first keeps an absurd count from driving the allocation below.
      if (n > c.remaining() / min_value_bytes(out->elem_type))
        return Status::error(what + ": array of " + std::to_string(n) + " " + gguf_type_name(out->elem_type) +
                             " cannot fit in the " + std::to_string(c.remaining()) + " bytes left");
      st.array_elements += n;
      if (st.array_elements > kMaxArrayElements)
        return Status::error(what + ": metadata arrays hold more than " + std::to_string(kMaxArrayElements) + " elements in total");
      out->items.resize(size_t(n));
      for (uint64_t k = 0; k < n; ++k) {
        WEFT_RETURN_IF_ERROR(read_value(c, out->elem_type, depth + 1, st, &out->items[size_t(k)],
                                        what + "[" + std::to_string(k) + "]"));
      }
      return Status();
    }
  }
  return Status::error(what + ": unknown value type");
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Element count and byte size of a tensor, or an error for dims and types that cannot be.
Status tensor_size(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, size_t* nbytes) {
  const auto* tr = ggml_type_traits(uint32_t(type));
  if (tr == nullptr) return Status::error("tensor '" + name + "': unsupported type");
  if (ne.empty() || ne.size() > kGgufMaxDims)
    return Status::error("tensor '" + name + "': " + std::to_string(ne.size()) + " dimensions (1.." + std::to_string(kGgufMaxDims) + " allowed)");
  for (int64_t d : ne)
    if (d < 0) return Status::error("tensor '" + name + "': negative dimension");
  auto row = ggml_row_bytes_checked(type, ne[0]);
  if (!row)
    return Status::error("tensor '" + name + "': row of " + std::to_string(ne[0]) + " values is not a whole number of " +
                         tr->name + " blocks of " + std::to_string(tr->block_size));
  uint64_t bytes = *row, elems = uint64_t(ne[0]);
  for (size_t k = 1; k < ne.size(); ++k) {
    if (__builtin_mul_overflow(bytes, uint64_t(ne[k]), &bytes) || __builtin_mul_overflow(elems, uint64_t(ne[k]), &elems) ||
        elems > uint64_t(std::numeric_limits<int64_t>::max()))
      return Status::error("tensor '" + name + "': size overflows");
  }
  if (bytes > uint64_t(std::numeric_limits<size_t>::max() / 2)) return Status::error("tensor '" + name + "': size overflows");
  *nbytes = size_t(bytes);
  return Status();
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "?";
}

GgufValue GgufValue::array(GgufType elem_type, std::vector<GgufValue> items) {
  GgufValue x;
  x.type = GgufType::kArray;
  x.elem_type = elem_type;
  x.items = std::move(items);
  return x;
}

GgufValue GgufValue::string_array(const std::vector<std::string>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(string(s));
  return array(GgufType::kString, std::move(items));
}

GgufValue GgufValue::i32_array(const std::vector<int32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t s : v) items.push_back(i32(s));
  return array(GgufType::kI32, std::move(items));
}

GgufValue GgufValue::f32_array(const std::vector<float>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float s : v) items.push_back(f32(s));
  return array(GgufType::kF32, std::move(items));
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  if (type == GgufType::kArray) return elem_type == o.elem_type && items == o.items;
  if (type == GgufType::kString) return str == o.str;
  if (type == GgufType::kF32 || type == GgufType::kF64) return std::memcmp(&f, &o.f, sizeof f) == 0;
  return u == o.u && i == o.i;
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

Status GgufFile::parse_into(const uint8_t* data, size_t size, GgufFile* f) {
  Cursor c(data, size);
  const uint8_t* magic;
  WEFT_RETURN_IF_ERROR(c.bytes(4, &magic, "magic"));
  if (std::memcmp(magic, kMagic, 4) != 0) return Status::error("not a GGUF file (bad magic)");
  WEFT_RETURN_IF_ERROR(c.scalar(&f->version_, "version"));
  if (f->version_ == 1) return Status::error("GGUF version 1 is not supported (re-convert the model)");
  if (f->version_ != 2 && f->version_ != 3)
    return Status::error("unsupported GGUF version " + std::to_string(f->version_) + " (2 and 3 are read; big-endian files are not)");
  uint64_t n_tensors, n_kv;
  WEFT_RETURN_IF_ERROR(c.scalar(&n_tensors, "tensor count"));
  WEFT_RETURN_IF_ERROR(c.scalar(&n_kv, "metadata count"));
  // A key-value pair takes at least 8 (key length) + 1 + 4 (type) + 1 bytes, a tensor info
  // 8 + 1 + 4 + 8 + 4 + 8: counts beyond that are lies, rejected before anything is allocated.
  if (n_kv > c.remaining() / 14)
    return Status::error("metadata count " + std::to_string(n_kv) + " cannot fit in a file of " + std::to_string(size) + " bytes");
  if (n_tensors > c.remaining() / 33)
    return Status::error("tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " + std::to_string(size) + " bytes");

  ParseState st;
  f->kv_.reserve(size_t(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string what = "metadata #" + std::to_string(k);
    std::string key;
    WEFT_RETURN_IF_ERROR(c.string(&key, kMaxKeyBytes, what + " key"));
    if (key.empty()) return Status::error(what + ": empty key");
    uint32_t type;
    WEFT_RETURN_IF_ERROR(c.scalar(&type, "type of '" + key + "'"));
    if (!valid_value_type(type)) return Status::error("metadata '" + key + "': unknown value type " + std::to_string(type));
    GgufValue v;
    WEFT_RETURN_IF_ERROR(read_value(c, GgufType(type), 0, st, &v, "metadata '" + key + "'"));
    if (!f->kv_index_.emplace(key, f->kv_.size()).second) return Status::error("duplicate metadata key '" + key + "'");
    f->kv_.emplace_back(std::move(key), std::move(v));
  }

  f->alignment_ = kGgufDefaultAlignment;
  if (const GgufValue* a = f->find("general.alignment")) {
    if (a->type != GgufType::kU32) return Status::error(std::string("general.alignment must be a u32, not ") + gguf_type_name(a->type));
    if (!is_pow2(a->u)) return Status::error("general.alignment " + std::to_string(a->u) + " is not a power of two");
    f->alignment_ = uint32_t(a->u);
  }

  f->tensors_.reserve(size_t(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    WEFT_RETURN_IF_ERROR(c.string(&t.name, std::numeric_limits<size_t>::max(), "tensor #" + std::to_string(k) + " name"));
    if (t.name.empty()) return Status::error("tensor #" + std::to_string(k) + ": empty name");
    if (t.name.size() > kGgufMaxNameBytes)
      return Status::error("tensor name '" + t.name.substr(0, 80) + "' is longer than " + std::to_string(kGgufMaxNameBytes) + " bytes");
    const std::string what = "tensor '" + t.name + "'";
    uint32_t n_dims;
    WEFT_RETURN_IF_ERROR(c.scalar(&n_dims, what + " dimension count"));
    if (n_dims == 0 || n_dims > kGgufMaxDims)
      return Status::error(what + ": " + std::to_string(n_dims) + " dimensions (1.." + std::to_string(kGgufMaxDims) + " allowed)");
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t v;
      WEFT_RETURN_IF_ERROR(c.scalar(&v, what + " dimension"));
      if (v > uint64_t(std::numeric_limits<int64_t>::max())) return Status::error(what + ": dimension " + std::to_string(v) + " is absurd");
      t.ne.push_back(int64_t(v));
    }
    uint32_t type;
    WEFT_RETURN_IF_ERROR(c.scalar(&type, what + " type"));
    if (ggml_type_traits(type) == nullptr)
      return Status::error(what + ": tensor type " + std::to_string(type) + " (" + ggml_type_name_any(type) + ") is not supported");
    t.type = GgmlType(type);
    WEFT_RETURN_IF_ERROR(c.scalar(&t.offset, what + " offset"));
    WEFT_RETURN_IF_ERROR(tensor_size(t.name, t.type, t.ne, &t.nbytes));
    if (t.offset % f->alignment_ != 0)
      return Status::error(what + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " + std::to_string(f->alignment_));
    if (!f->tensor_index_.emplace(t.name, f->tensors_.size()).second) return Status::error("duplicate tensor name '" + t.name + "'");
    f->tensors_.push_back(std::move(t));
  }

  f->data_offset_ = align_up(c.pos(), f->alignment_);
  const uint64_t data_size = f->data_offset_ <= size ? size - f->data_offset_ : 0;
  for (auto& t : f->tensors_) {
    if (t.nbytes == 0) continue;
    if (f->data_offset_ > size || t.offset > data_size || t.nbytes > data_size - t.offset)
      return Status::error("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
                           ") lies beyond the end of the file (data section of " + std::to_string(data_size) +
                           " bytes): truncated file or lying header");
    t.data = data + f->data_offset_ + t.offset;
  }
  std::vector<const GgufTensor*> by_offset;
  for (const auto& t : f->tensors_)
    if (t.nbytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    if (by_offset[k]->offset < by_offset[k - 1]->offset + by_offset[k - 1]->nbytes)
      return Status::error("tensors '" + by_offset[k - 1]->name + "' and '" + by_offset[k]->name + "' overlap");
  }
  return Status();
}

Result<GgufFile> GgufFile::parse(const uint8_t* data, size_t size) {
  GgufFile f;
  Status s = parse_into(data, size, &f);
  if (!s.ok()) return s;
  return f;
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped.ok()) return mapped.status();
  GgufFile f;
  f.file_ = std::move(mapped.value());
  // The map's address does not change when the MappedFile moves, so the views stay valid.
  Status s = parse_into(f.file_.data(), f.file_.size(), &f);
  if (!s.ok()) return s.with_context("'" + path + "'");
  return f;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return Status::error("GGUF metadata '" + key + "' is missing");
  if (v->type != GgufType::kString) return Status::error("GGUF metadata '" + key + "' is a " + gguf_type_name(v->type) + ", not a string");
  return v->str;
}

Result<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return Status::error("GGUF metadata '" + key + "' is missing");
  if (v->is_unsigned()) return v->u;
  if (v->is_signed() && v->i >= 0) return uint64_t(v->i);
  return Status::error("GGUF metadata '" + key + "' is a " + gguf_type_name(v->type) + ", not a non-negative integer");
}

Result<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return Status::error("GGUF metadata '" + key + "' is missing");
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString)
    return Status::error("GGUF metadata '" + key + "' is not an array of strings");
  std::vector<std::string> out;
  out.reserve(v->items.size());
  for (const auto& it : v->items) out.push_back(it.str);
  return out;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

template <typename T>
void put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void put_string(std::string* out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out->append(s);
}

Status put_value(std::string* out, const GgufValue& v, int depth, const std::string& key) {
  switch (v.type) {
    case GgufType::kU8: put<uint8_t>(out, uint8_t(v.u)); break;
    case GgufType::kU16: put<uint16_t>(out, uint16_t(v.u)); break;
    case GgufType::kU32: put<uint32_t>(out, uint32_t(v.u)); break;
    case GgufType::kU64: put<uint64_t>(out, v.u); break;
    case GgufType::kBool: put<uint8_t>(out, v.u ? 1 : 0); break;
    case GgufType::kI8: put<int8_t>(out, int8_t(v.i)); break;
    case GgufType::kI16: put<int16_t>(out, int16_t(v.i)); break;
    case GgufType::kI32: put<int32_t>(out, int32_t(v.i)); break;
    case GgufType::kI64: put<int64_t>(out, v.i); break;
    case GgufType::kF32: put<float>(out, float(v.f)); break;
    case GgufType::kF64: put<double>(out, v.f); break;
    case GgufType::kString: put_string(out, v.str); break;
    case GgufType::kArray:
      if (v.elem_type == GgufType::kArray && depth + 1 >= kGgufMaxArrayDepth)
        return Status::error("metadata '" + key + "': arrays nested too deep");
      put<uint32_t>(out, uint32_t(v.elem_type));
      put<uint64_t>(out, v.items.size());
      for (const auto& it : v.items) {
        if (it.type != v.elem_type)
          return Status::error("metadata '" + key + "': array of " + gguf_type_name(v.elem_type) + " holds a " + gguf_type_name(it.type));
        WEFT_RETURN_IF_ERROR(put_value(out, it, depth + 1, key));
      }
      break;
  }
  return Status();
}

// Everything before the data section (padded to the alignment), the tensors' sizes and offsets.
struct Layout {
  std::string header;
  std::vector<size_t> nbytes;
  std::vector<uint64_t> offsets;
  uint64_t data_bytes = 0;  // data section, padding after the last tensor included
  uint32_t alignment = kGgufDefaultAlignment;
};

Status plan(const std::vector<std::pair<std::string, GgufValue>>& metadata,
            const std::vector<GgufTensorToWrite>& tensors, Layout* lay) {
  std::map<std::string, int> seen;
  for (const auto& [key, value] : metadata) {
    if (key.empty() || key.size() > kMaxKeyBytes) return Status::error("metadata key '" + key.substr(0, 80) + "': empty or too long");
    if (!seen.emplace(key, 0).second) return Status::error("duplicate metadata key '" + key + "'");
    if (key == "general.alignment") {
      if (value.type != GgufType::kU32 || !is_pow2(value.u)) return Status::error("general.alignment must be a u32 power of two");
      lay->alignment = uint32_t(value.u);
    }
  }
  seen.clear();
  std::string& h = lay->header;
  h.append(reinterpret_cast<const char*>(kMagic), 4);
  put<uint32_t>(&h, 3);
  put<uint64_t>(&h, tensors.size());
  put<uint64_t>(&h, metadata.size());
  for (const auto& [key, value] : metadata) {
    put_string(&h, key);
    put<uint32_t>(&h, uint32_t(value.type));
    WEFT_RETURN_IF_ERROR(put_value(&h, value, 0, key));
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name.size() > kGgufMaxNameBytes)
      return Status::error("tensor name '" + t.name + "' must be 1.." + std::to_string(kGgufMaxNameBytes) + " bytes");
    if (!seen.emplace(t.name, 0).second) return Status::error("duplicate tensor name '" + t.name + "'");
    size_t nbytes;
    WEFT_RETURN_IF_ERROR(tensor_size(t.name, t.type, t.ne, &nbytes));
    if (nbytes > 0 && t.data == nullptr) return Status::error("tensor '" + t.name + "' has no data");
    put_string(&h, t.name);
    put<uint32_t>(&h, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(&h, uint64_t(d));
    put<uint32_t>(&h, uint32_t(t.type));
    put<uint64_t>(&h, offset);
    lay->nbytes.push_back(nbytes);
    lay->offsets.push_back(offset);
    offset = align_up(offset + nbytes, lay->alignment);
  }
  lay->data_bytes = offset;
  h.resize(size_t(align_up(h.size(), lay->alignment)), '\0');
  return Status();
}

}  // namespace

Result<std::string> serialize_gguf(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                                   const std::vector<GgufTensorToWrite>& tensors) {
  Layout lay;
  WEFT_RETURN_IF_ERROR(plan(metadata, tensors, &lay));
  std::string out = std::move(lay.header);
  const size_t base = out.size();
  out.resize(base + size_t(lay.data_bytes), '\0');
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (lay.nbytes[k]) std::memcpy(&out[base + size_t(lay.offsets[k])], tensors[k].data, lay.nbytes[k]);
  }
  return out;
}

Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                  const std::vector<GgufTensorToWrite>& tensors) {
  Layout lay;
  Status planned = plan(metadata, tensors, &lay);
  if (!planned.ok()) return planned.with_context("writing '" + path + "'");
  const std::string tmp = path + ".tmp";
  FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (!fp) return Status::error("cannot create '" + tmp + "': " + std::strerror(errno));
  bool ok = std::fwrite(lay.header.data(), 1, lay.header.size(), fp) == lay.header.size();
  static const char kZeros[256] = {};
  uint64_t written = 0;
  for (size_t k = 0; ok && k < tensors.size(); ++k) {
    for (uint64_t pad = lay.offsets[k] - written; ok && pad > 0;) {  // only between tensors
      const size_t n = size_t(std::min<uint64_t>(pad, sizeof kZeros));
      ok = std::fwrite(kZeros, 1, n, fp) == n;
      pad -= n;
    }
    if (ok && lay.nbytes[k]) ok = std::fwrite(tensors[k].data, 1, lay.nbytes[k], fp) == lay.nbytes[k];
    written = lay.offsets[k] + lay.nbytes[k];
  }
  for (uint64_t pad = lay.data_bytes - written; ok && pad > 0;) {
    const size_t n = size_t(std::min<uint64_t>(pad, sizeof kZeros));
    ok = std::fwrite(kZeros, 1, n, fp) == n;
    pad -= n;
  }
  ok = (std::fclose(fp) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return Status::error("write failed for '" + path + "' (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::error("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  return Status();
}

}  // namespace weft
