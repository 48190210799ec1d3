// The forward pass of every supported decoder: embed, then one loop over layers whose kind
// (gated full attention or Gated DeltaNet; dense or MoE FFN) was fixed at weight binding, then
// the final norm and the output head. Reads top to bottom in forward.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "model/state.h"

namespace weft {

class ThreadPool;

// Scratch buffers of one forward call, reused across calls (no per-token allocation once warm).
struct ForwardBuffers {
  std::vector<float> x, xn, y;                  // [T, H]
  std::vector<float> a, b, c, d, e;             // projections, sized on demand
  std::vector<float> rope_cos, rope_sin;        // [T, rotary_dim / 2]
  std::vector<float> router, moe_in, moe_g, moe_u, moe_out;  // MoE work
  std::vector<int32_t> moe_rows, moe_top, moe_order;  // routed rows; top-k ids; sort scratch
  std::vector<float> moe_weight;                      // top-k routing weights
  std::vector<float> inv_freq;
};

struct ForwardOptions {
  // Logits of every position ([T, V]) or only of the last ([1, V]); null computes none.
  float* logits = nullptr;
  bool all_logits = false;
};

// Runs tokens ids[0..T) at positions [state.position(), + T) and advances the state.
// Fails (and changes nothing) on a token id outside the vocabulary.
Status forward(const Model& model, ModelState& state, const int32_t* ids, int64_t T,
               const ForwardOptions& options, ForwardBuffers& buffers, ThreadPool* pool);

}  // namespace weft
