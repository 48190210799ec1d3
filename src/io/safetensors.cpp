// Safetensors reader and writer; see safetensors.h for the checks the reader makes.
#include "io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

namespace weft {

namespace {

// A header larger than this is not a weight file we should trust (real ones are < 10 MiB).
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;

struct Span { uint64_t begin, end; const std::string* name; };

Status parse_entry(const std::string& name, const nlohmann::json& entry, uint64_t data_size,
                   const uint8_t* data, TensorView* out, Span* span) {
  if (!entry.is_object()) return Status::error("tensor '" + name + "': entry is not an object");
  auto dt = entry.find("dtype");
  auto sh = entry.find("shape");
  auto off = entry.find("data_offsets");
  if (dt == entry.end() || !dt->is_string() || sh == entry.end() || !sh->is_array() ||
      off == entry.end() || !off->is_array() || off->size() != 2)
    return Status::error("tensor '" + name + "': needs dtype, shape and data_offsets [begin, end]");
  DType dtype;
  if (!dtype_from_safetensors(dt->get<std::string>(), &dtype))
    return Status::error("tensor '" + name + "': unsupported dtype " + dt->get<std::string>());
  std::vector<int64_t> shape;
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned()) return Status::error("tensor '" + name + "': shape has a non-integer or negative dimension");
    uint64_t v = d.get<uint64_t>();
    if (v > (1ull << 40) || (v != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / v))
      return Status::error("tensor '" + name + "': absurd shape");
    numel *= v;
    shape.push_back(int64_t(v));
  }
  if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
    return Status::error("tensor '" + name + "': data_offsets must be non-negative integers");
  uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
  if (begin > end) return Status::error("tensor '" + name + "': data_offsets begin > end");
  if (end > data_size)
    return Status::error("tensor '" + name + "': data_offsets end " + std::to_string(end) +
                         " lies beyond the data region (" + std::to_string(data_size) +
                         " bytes): file truncated or header lies");
  uint64_t expect = numel * dtype_size(dtype);
  if (end - begin != expect)
    return Status::error("tensor '" + name + "': " + std::to_string(end - begin) + " bytes for shape " +
                         shape_string(shape) + " of " + dtype_name(dtype) + " (expected " +
                         std::to_string(expect) + ")");
  out->dtype = dtype;
  out->shape = std::move(shape);
  out->data = data + begin;
  out->nbytes = size_t(expect);
  *span = {begin, end, nullptr};
  return Status();
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped.ok()) return mapped.status();
  SafetensorsFile f;
  f.file_ = std::move(mapped.value());
  WEFT_RETURN_IF_ERROR(f.index(f.file_.data(), f.file_.size(), path));
  return f;
}

Result<SafetensorsFile> SafetensorsFile::from_memory(const uint8_t* data, size_t size,
                                                     const std::string& label) {
  SafetensorsFile f;
  WEFT_RETURN_IF_ERROR(f.index(data, size, label));
  return f;
}

Status SafetensorsFile::index(const uint8_t* base, size_t size, const std::string& path) {
  auto fail = [&](const std::string& msg) { return Status::error("'" + path + "': " + msg); };
  if (size < 8) return fail("too small to be a safetensors file (" + std::to_string(size) + " bytes)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | base[i];
  if (header_len > kMaxHeaderBytes || header_len > size - 8)
    return fail("header length " + std::to_string(header_len) + " exceeds the file (" +
                std::to_string(size) + " bytes): truncated or not safetensors");
  nlohmann::json header = nlohmann::json::parse(base + 8, base + 8 + header_len, nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return fail("header is not a valid JSON object");
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return fail("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    TensorView view;
    Span span{};
    Status s = parse_entry(it.key(), *it, data_size, data, &view, &span);
    if (!s.ok()) return s.with_context("'" + path + "'");
    auto [pos, inserted] = tensors_.emplace(it.key(), std::move(view));
    span.name = &pos->first;
    if (span.end > span.begin) spans.push_back(span);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end)
      return fail("tensors '" + *spans[i - 1].name + "' and '" + *spans[i].name + "' overlap");
  }
  return Status();
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

namespace {

// The header of a file holding `tensors` back to back in the order given; *data_bytes receives
// the size of the data region.
Result<std::string> build_header(const std::vector<TensorToWrite>& tensors,
                                 const std::map<std::string, std::string>& metadata, uint64_t* data_bytes) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const char* name = dtype_safetensors_name(t.dtype);
    if (!name) return Status::error("cannot write tensor '" + t.name + "' of dtype " + dtype_name(t.dtype));
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    uint64_t bytes = numel * dtype_size(t.dtype);
    header[t.name] = {{"dtype", name}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');  // keep the data region 8-byte aligned
  *data_bytes = offset;
  return text;
}

}  // namespace

Result<std::unique_ptr<SafetensorsStreamWriter>> SafetensorsStreamWriter::open(
    const std::string& path, const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::unique_ptr<SafetensorsStreamWriter> w(new SafetensorsStreamWriter());
  auto text = build_header(tensors, metadata, &w->expected_);
  if (!text.ok()) return text.status();
  w->path_ = path;
  w->tmp_ = path + ".tmp";
  w->fp_ = std::fopen(w->tmp_.c_str(), "wb");
  if (!w->fp_) return Status::error("cannot create '" + w->tmp_ + "': " + std::strerror(errno));
  uint8_t len_bytes[8];
  const uint64_t len = text->size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = uint8_t(len >> (8 * i));
  if (std::fwrite(len_bytes, 1, 8, w->fp_) != 8 || std::fwrite(text->data(), 1, len, w->fp_) != len) {
    w->abandon();
    return Status::error("write failed for '" + path + "' (disk full?)");
  }
  return w;
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() { abandon(); }

void SafetensorsStreamWriter::abandon() {
  if (!fp_) return;
  std::fclose(fp_);
  fp_ = nullptr;
  std::remove(tmp_.c_str());
}

Status SafetensorsStreamWriter::append(const void* data, size_t bytes) {
  if (!fp_) return Status::error("'" + path_ + "': append after the file was finished or abandoned");
  if (bytes > expected_ - written_) {
    abandon();
    return Status::error("'" + path_ + "': " + std::to_string(written_ + bytes) + " data bytes written, header announced " +
                         std::to_string(expected_));
  }
  if (bytes != 0 && std::fwrite(data, 1, bytes, fp_) != bytes) {
    abandon();
    return Status::error("write failed for '" + path_ + "' (disk full?)");
  }
  written_ += bytes;
  return Status();
}

Status SafetensorsStreamWriter::finish() {
  if (!fp_) return Status::error("'" + path_ + "': finish after the file was finished or abandoned");
  if (written_ != expected_) {
    abandon();
    return Status::error("'" + path_ + "': only " + std::to_string(written_) + " of " + std::to_string(expected_) +
                         " data bytes written");
  }
  const bool closed = std::fclose(fp_) == 0;
  fp_ = nullptr;
  if (!closed) {
    std::remove(tmp_.c_str());
    return Status::error("write failed for '" + path_ + "' (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::remove(tmp_.c_str());
    return Status::error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + ec.message());
  }
  return Status();
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  auto w = SafetensorsStreamWriter::open(path, tensors, metadata);
  if (!w.ok()) return w.status();
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    WEFT_RETURN_IF_ERROR(w.value()->append(t.data, size_t(numel * dtype_size(t.dtype))));
  }
  return w.value()->finish();
}

}  // namespace weft
