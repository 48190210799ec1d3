// Sampler: turns next-token logits into a token. Greedy when temperature is 0; otherwise
// temperature, then top-k, top-p and min-p filtering, then a draw from a seeded RNG of our own
// (so a seed reproduces a run on any machine).
#pragma once

#include <cstdint>
#include <vector>

namespace weft {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  int32_t sample(const float* logits, int64_t vocab);

 private:
  double next_uniform();  // [0, 1)
  SamplerOptions options_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

int32_t argmax(const float* x, int64_t n);

}  // namespace weft
