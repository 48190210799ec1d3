#include "io/model_files.h"

#include <filesystem>
#include <set>

#include "core/mapped_file.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

Result<nlohmann::json> read_json(const std::string& path) {
  auto text = read_text_file(path);
  if (!text.ok()) return text.status();
  auto j = nlohmann::json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::error("'" + path + "' is not valid JSON");
  return j;
}

}  // namespace

Result<std::unique_ptr<ModelFiles>> ModelFiles::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (fs::exists(dir, ec))
      return Status::error("'" + dir + "' is a file but neither a model directory nor a GGUF file (it does not start with the GGUF magic)");
    return Status::error("model directory '" + dir + "' does not exist or is not a directory");
  }
  auto files = std::make_unique<ModelFiles>();
  files->dir_ = dir;
  auto config = read_json(dir + "/config.json");
  if (!config.ok()) return config.status();
  files->config_ = std::move(config.value());
  if (fs::exists(dir + "/generation_config.json")) {
    auto gen = read_json(dir + "/generation_config.json");
    if (gen.ok()) files->generation_config_ = std::move(gen.value());
  }

  std::vector<std::string> shard_names;
  nlohmann::json weight_map;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (fs::exists(index_path)) {
    auto index = read_json(index_path);
    if (!index.ok()) return index.status();
    if (!index->contains("weight_map") || !(*index)["weight_map"].is_object())
      return Status::error("'" + index_path + "' has no weight_map object");
    weight_map = (*index)["weight_map"];
    std::set<std::string> unique;
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it->is_string()) return Status::error("'" + index_path + "': weight_map entry '" + it.key() + "' is not a file name");
      std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..")
        return Status::error("'" + index_path + "': shard name '" + shard + "' must be a plain file name");
      if (unique.insert(shard).second) shard_names.push_back(shard);
    }
  } else if (fs::exists(dir + "/model.safetensors")) {
    shard_names.push_back("model.safetensors");
  } else {
    return Status::error("no model.safetensors or model.safetensors.index.json in '" + dir + "'");
  }

  for (const auto& name : shard_names) {
    auto shard = SafetensorsFile::open(dir + "/" + name);
    if (!shard.ok()) return shard.status();
    files->shards_.push_back(std::move(shard.value()));
  }
  for (size_t s = 0; s < files->shards_.size(); ++s) {
    for (const auto& [name, view] : files->shards_[s].tensors()) {
      if (!files->tensors_.emplace(name, view).second)
        return Status::error("tensor '" + name + "' appears in more than one shard of '" + dir + "'");
    }
  }
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    if (!files->tensors_.count(it.key()))
      return Status::error("index says tensor '" + it.key() + "' is in '" + it->get<std::string>() +
                           "', but that shard does not hold it");
  }
  return files;
}

const TensorView* ModelFiles::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::unique_ptr<ModelFiles> ModelFiles::in_memory(std::string label, nlohmann::json config,
                                                  nlohmann::json generation_config,
                                                  std::unordered_map<std::string, TensorView> tensors,
                                                  std::vector<OwnedBytes> memory) {
  auto f = std::unique_ptr<ModelFiles>(new ModelFiles());
  f->dir_ = std::move(label);
  f->config_ = std::move(config);
  f->generation_config_ = std::move(generation_config);
  f->tensors_ = std::move(tensors);
  f->memory_ = std::move(memory);
  return f;
}

uint64_t ModelFiles::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, view] : tensors_) n += view.nbytes;
  return n;
}

}  // namespace weft
