// ModelFiles: a Hugging Face model directory opened for reading: config.json (+
// generation_config.json) and the safetensors weights, single-file or sharded through
// model.safetensors.index.json. Tensors are views into memory-mapped shards, valid while the
// ModelFiles lives.
//
// A GGUF file (llama.cpp's format) opens into the same shape (open_gguf, gguf_model_files.cpp):
// a config.json synthesized from the GGUF hyper-parameters and the tensors under their Hugging
// Face names and layouts, with llama.cpp's converter reorders undone (gguf_names.h), so weight
// binding is one code path for both formats. The one difference left is norms_plus_one_folded().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/owned_bytes.h"
#include "core/status.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace weft {

class ModelFiles {
 public:
  // Fails with a clear message for a missing directory, missing/invalid config.json, missing
  // shards, a weight_map naming a tensor its shard does not hold, or a tensor in two shards.
  static Result<std::unique_ptr<ModelFiles>> open(const std::string& dir);
  // Opens a .gguf file; errors name the file and the tensor or key that is wrong.
  static Result<std::unique_ptr<ModelFiles>> open_gguf(const std::string& path);
  // True for a path that names a regular file starting with the GGUF magic.
  static bool is_gguf(const std::string& path);
  // A model that lives in memory, not in files (synthetic weights: `weft bench --synthetic` on a
  // GPU, where a 70 GB model need not touch the disk). `tensors` view `memory`, which the
  // ModelFiles keeps and frees (each block with its own deleter: a block may be device memory,
  // which only a device backend may read); `label` stands for the directory in messages.
  static std::unique_ptr<ModelFiles> in_memory(std::string label, nlohmann::json config,
                                               nlohmann::json generation_config,
                                               std::unordered_map<std::string, TensorView> tensors,
                                               std::vector<OwnedBytes> memory);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  const nlohmann::json& generation_config() const { return generation_config_; }
  const TensorView* find(const std::string& name) const;
  const std::unordered_map<std::string, TensorView>& tensors() const { return tensors_; }
  uint64_t total_bytes() const;
  // GGUF files of the hybrids store every RMSNorm weight except the GDN output norm as 1 + w
  // (computed in f32), so the model uses plain x̂·w' on them: the same product x̂·(1 + w) does.
  bool norms_plus_one_folded() const { return norms_plus_one_folded_; }
  const GgufFile* gguf() const { return gguf_.get(); }
  // A matrix whose input columns are stored in another head order than the HF layout (GGUF
  // ssm_out of a block type whose blocks straddle value heads, so the columns cannot move):
  // column chunk i (cols / order.size() wide) multiplies input head order[i]. nullptr: HF order.
  const std::vector<int64_t>* input_head_order(const std::string& name) const {
    auto it = input_head_orders_.find(name);
    return it == input_head_orders_.end() ? nullptr : &it->second;
  }

 private:
  std::string dir_;
  nlohmann::json config_;
  nlohmann::json generation_config_;
  std::vector<SafetensorsFile> shards_;
  std::unordered_map<std::string, TensorView> tensors_;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<std::vector<uint8_t>> owned_;  // tensors reordered out of the GGUF layout
  std::vector<OwnedBytes> memory_;  // the tensors of an in-memory model (host or device)
  bool norms_plus_one_folded_ = false;
  std::unordered_map<std::string, std::vector<int64_t>> input_head_orders_;
};

}  // namespace weft
