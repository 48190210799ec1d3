// From a validated request's sampling fields and the model's defaults to the scheduler's
// GenerationRequest: the client's values win, the model's generation_config.json fills the rest,
// max_tokens defaults to what the context leaves (capped by the server's limit).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/generation_defaults.h"
#include "engine/scheduler.h"
#include "server/request.h"

namespace weft::server {

// fallback_seed: used when sampling and the client gave no seed (OpenAI: a fresh draw per request).
GenerationRequest make_generation_request(std::vector<int32_t> prompt, const SamplingFields& fields,
                                          const GenerationDefaults& defaults, int64_t ctx, int64_t max_tokens_limit,
                                          uint64_t fallback_seed);

}  // namespace weft::server
