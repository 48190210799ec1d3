#include "server/generation_request.h"

#include <algorithm>

namespace weft::server {

GenerationRequest make_generation_request(std::vector<int32_t> prompt, const SamplingFields& f,
                                          const GenerationDefaults& defaults, int64_t ctx, int64_t max_tokens_limit,
                                          uint64_t fallback_seed) {
  GenerationRequest r;
  r.sampling = defaults.sampling;
  if (f.temperature) r.sampling.temperature = float(*f.temperature);
  if (f.top_p) r.sampling.top_p = float(*f.top_p);
  if (f.top_k) r.sampling.top_k = int(*f.top_k);
  if (f.min_p) r.sampling.min_p = float(*f.min_p);
  r.sampling.seed = f.seed ? *f.seed : fallback_seed;
  const int64_t room = std::max<int64_t>(1, ctx - int64_t(prompt.size()));
  r.max_tokens = f.max_tokens ? *f.max_tokens : std::min(room, max_tokens_limit);
  r.stop = f.stop;
  r.ignore_eos = f.ignore_eos;
  r.reuse_prefix = f.cache_prompt;
  r.top_logprobs = f.top_logprobs;
  r.prompt = std::move(prompt);
  return r;
}

}  // namespace weft::server
