// Sampling defaults of a model, read from its generation_config.json the way transformers'
// GenerationConfig reads them: sampling only when it says do_sample: true, then its temperature
// (default 1.0), top_k (default 50), top_p (default 1.0) and min_p (default off). A model without
// the file (or a .gguf, which carries none) decodes greedily. `weft generate`, `weft chat` and
// `weft serve` all start from these and print them (describe()), so they agree.
#pragma once

#include <string>

#include "core/status.h"
#include "engine/sampler.h"

namespace weft {

struct GenerationDefaults {
  SamplerOptions sampling;  // seed 0
  std::string source;       // the file read, or why none was
  // One line for the start-up banner: "sampling: temperature 0.6, top_k 20, top_p 0.95 (from ...)".
  std::string describe() const;
  // The same line for what will actually run once flags have changed some settings:
  // "sampling: temperature 0.5, top_k 20, ... (flags over <source>)".
  std::string describe_effective(const SamplerOptions& effective, bool flags_given) const;
};

// model_path: a model directory or a .gguf file. A generation_config.json that exists but is not
// valid JSON, or holds a wrong-typed value, is an error (not silently greedy).
Result<GenerationDefaults> load_generation_defaults(const std::string& model_path);
// The same from the file's text (tests).
Result<GenerationDefaults> parse_generation_defaults(const std::string& json_text, const std::string& source);

}  // namespace weft
