// Safetensors reading (memory-mapped, validated) and writing (atomic: temp file + rename).
//
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:
// [begin, end]}, "__metadata__": {str: str}}, then the data region; offsets are relative to it.
// Every claim of the header is checked against the file before any tensor is exposed: header
// length within the file, offsets inside the data region, begin <= end, no two tensors overlapping,
// byte count == numel * dtype size, and no shape whose element count overflows.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace weft {

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  // The same checks on bytes the caller holds (fuzzing, tests): the views point into `data`, which
  // must outlive the returned object; `label` names the bytes in messages; path() is empty.
  static Result<SafetensorsFile> from_memory(const uint8_t* data, size_t size, const std::string& label);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* find(const std::string& name) const;
  const std::string& path() const { return file_.path(); }

 private:
  // Validates the header of base[0, size) and fills tensors_ and metadata_.
  Status index(const uint8_t* base, size_t size, const std::string& label);

  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write; data must hold dtype_bytes(dtype, numel) bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes a safetensors file atomically (path + ".tmp", then rename), so a failed or interrupted
// write never leaves a half-written file under `path`.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// A safetensors file written in pieces: every tensor's name, dtype and shape are known up front
// (the header is written by open()), its bytes arrive later through append(), in file order
// (tensors in the order given, each row-major). Memory stays that of one piece: `weft logits`
// streams [T, V] rows batch by batch instead of holding T x V floats (32 GB at T = 32K and a
// 248,320-token vocabulary).
//
// Atomic like write_safetensors: bytes go to path + ".tmp", and finish() renames it onto `path`
// only once every byte announced by the header has been written. On any error, or when the
// writer is destroyed before finish(), the temp file is removed and `path` is left untouched.
// The bytes are identical to write_safetensors with the same tensors. Not thread safe.
class SafetensorsStreamWriter {
 public:
  // `tensors[i].data` is ignored (may be null): the bytes come through append().
  static Result<std::unique_ptr<SafetensorsStreamWriter>> open(const std::string& path,
                                                               const std::vector<TensorToWrite>& tensors,
                                                               const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  // Appends the next `bytes` bytes of the data region. Writing past the announced size is an
  // error (and abandons the file).
  Status append(const void* data, size_t bytes);
  // Checks that the data region is complete, closes and renames the temp file onto `path`.
  Status finish();

  uint64_t bytes_written() const { return written_; }
  uint64_t bytes_expected() const { return expected_; }

 private:
  SafetensorsStreamWriter() = default;
  void abandon();  // closes and removes the temp file

  std::string path_, tmp_;
  std::FILE* fp_ = nullptr;
  uint64_t written_ = 0, expected_ = 0;
};

}  // namespace weft
