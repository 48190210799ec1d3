// Random-weight models of real geometries, written as real Hugging Face directories
// (config.json + sharded safetensors), so loaders and benchmarks run without downloading weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/model_files.h"
#include "model/presets.h"
#include "nlohmann/json.hpp"

namespace weft {

// How a tensor's values are drawn. Scales are chosen so activations and logits look like a
// trained model's: O(1) per element through the stack, residual growth bounded.
struct SynthInit {
  enum Kind : uint8_t { kNormal, kUniform, kLogUniform };
  Kind kind = kNormal;
  float a = 0.0f;  // normal: mean; uniform/log-uniform: low
  float b = 0.0f;  // normal: std;  uniform/log-uniform: high
};

struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;
  SynthInit init;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Every tensor of the model in file order (embeddings, layer by layer, final norm, lm_head).
std::vector<SynthTensor> synth_tensors(const SynthSpec& spec);
// config.json as transformers writes it for spec.model_type.
nlohmann::json synth_config_json(const SynthSpec& spec);
// Bytes of all tensor data (headers and JSON excluded: they are noise next to the weights).
int64_t synth_estimated_bytes(const SynthSpec& spec);

struct SynthWriteOptions {
  bool force = false;             // replace a non-empty `dir`
  bool progress = false;          // a line per shard on stderr
  int threads = 0;                // 0 = all cores; values never depend on it
  int64_t max_shard_bytes = 2000000000;  // HF "2GB"; one bigger tensor gets a shard of its own
};

// Writes the model into `dir` via `dir`.tmp + rename, so a failed write leaves no half model.
// Refuses a non-empty `dir` unless options.force. Same spec (seed included) => same bytes.
Status synth_write(const SynthSpec& spec, const std::string& dir,
                   const SynthWriteOptions& options = {});

// The same model (same spec, same bytes as synth_write) held in memory instead of written: no
// disk, host memory for every tensor. Bind it with Model::load(std::move(files)).
Result<std::unique_ptr<ModelFiles>> synth_in_memory(const SynthSpec& spec, int threads = 0);

// Fills out[0..n) with the values of `init` for the stream (seed, name): exposed for tests and
// the throughput check. Deterministic regardless of threads (chunks are seeded by index).
void synth_fill(const SynthInit& init, uint64_t seed, const std::string& name, DType dtype,
                int64_t n, void* out, int threads = 1);

}  // namespace weft
