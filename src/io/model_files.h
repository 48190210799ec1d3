// ModelFiles: a Hugging Face model directory opened for reading: config.json (+
// generation_config.json) and the safetensors weights, single-file or sharded through
// model.safetensors.index.json. Tensors are views into memory-mapped shards, valid while the
// ModelFiles lives.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/safetensors.h"

namespace weft {

class ModelFiles {
 public:
  // Fails with a clear message for a missing directory, missing/invalid config.json, missing
  // shards, a weight_map naming a tensor its shard does not hold, or a tensor in two shards.
  static Result<std::unique_ptr<ModelFiles>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  const nlohmann::json& generation_config() const { return generation_config_; }
  const TensorView* find(const std::string& name) const;
  const std::unordered_map<std::string, TensorView>& tensors() const { return tensors_; }
  uint64_t total_bytes() const;

 private:
  std::string dir_;
  nlohmann::json config_;
  nlohmann::json generation_config_;
  std::vector<SafetensorsFile> shards_;
  std::unordered_map<std::string, TensorView> tensors_;
};

}  // namespace weft
