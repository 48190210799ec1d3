// Model: a loaded checkpoint — its files (memory-mapped), parsed config and bound weights.
// Immutable after load and safe to share between sessions and threads.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "io/model_files.h"
#include "model/config.h"
#include "model/weights.h"

namespace weft {

class Model {
 public:
  // Opens an HF directory or a .gguf file, parses its config and binds every weight, checking
  // each tensor's shape and dtype against the config. Errors name the tensor and both shapes.
  static Result<std::unique_ptr<Model>> load(const std::string& dir);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const ModelFiles& files() const { return *files_; }

 private:
  std::unique_ptr<ModelFiles> files_;
  ModelConfig config_;
  ModelWeights weights_;
};

}  // namespace weft
