// Model: a loaded checkpoint — its files (memory-mapped), parsed config and bound weights.
// Immutable after load and safe to share between sessions and threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/model_files.h"
#include "model/config.h"
#include "model/weights.h"

namespace weft {

class Model {
 public:
  // Opens an HF directory or a .gguf file, parses its config and binds every weight, checking
  // each tensor's shape and dtype against the config. Errors name the tensor and both shapes.
  //
  // Alignment: safetensors allows a data region at any offset (a header may be padded to any
  // length), so a mapped tensor can start at an odd address. Kernels read weights as typed
  // elements (float, uint16_t), so rather than make every kernel unaligned-safe, binding copies
  // each matrix that is not aligned to its element size into owned, aligned memory (it then
  // costs RAM instead of page cache); aligned tensors (every file weft or transformers writes)
  // stay zero-copy mmap views. Small vectors are read through memcpy and copied to f32 anyway.
  static Result<std::unique_ptr<Model>> load(const std::string& dir);
  // The same binding for files already open (or a model in memory: ModelFiles::in_memory).
  static Result<std::unique_ptr<Model>> load(std::unique_ptr<ModelFiles> files);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const ModelFiles& files() const { return *files_; }

 private:
  std::unique_ptr<ModelFiles> files_;
  // Aligned copies of the weight tensors whose mapped bytes are not aligned to their element
  // size (see Model::load); the Matrix views of those tensors point here.
  std::vector<std::unique_ptr<uint8_t[]>> aligned_copies_;
  ModelConfig config_;
  ModelWeights weights_;
};

}  // namespace weft
