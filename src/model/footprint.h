// Footprint: what a model costs — parameters (total and active per token), the weight bytes a
// decoded token must read, and the cache bytes per context token for a KV type. The byte model
// of the lab (bench ceiling, roofline) is computed from these, from the model's real tensors.
#pragma once

#include <cstdint>

#include <map>
#include <string>

#include "model/model.h"
#include "model/state.h"

namespace weft {

struct Footprint {
  int64_t total_params = 0;        // every bound tensor (embedding and head once if tied)
  int64_t active_params = 0;       // per token: top-k experts of E, everything else whole
  uint64_t total_weight_bytes = 0;
  // Weight bytes one decoded token reads: every projection, the router, the shared expert, the
  // top-k experts and the output head in their stored dtypes, plus one embedding row.
  uint64_t active_weight_bytes = 0;
  uint64_t gdn_state_bytes = 0;    // conv windows + delta-rule states, f32, independent of context
  // Routed experts, for batch byte models: the weight bytes of every routed expert of every MoE
  // layer summed (divide by E·layers for one expert of one layer), and the top-k share of it
  // that active_weight_bytes includes.
  uint64_t routed_expert_bytes = 0;
  uint64_t active_routed_expert_bytes = 0;
  int64_t active_routed_expert_params = 0;  // the top-k share of the routed experts' parameters
  int64_t moe_layers = 0;
  int64_t experts = 0;             // routed experts per MoE layer
  int64_t full_attention_layers = 0;
  int64_t linear_attention_layers = 0;
  // Total weight bytes per stored type ("bf16", "q4_K", ...; small f32 vectors under "f32").
  std::map<std::string, uint64_t> weight_bytes_by_type;
};

Footprint compute_footprint(const Model& model);

// KV bytes per context token for K type k and V type v (full-attention layers only).
uint64_t kv_bytes_per_token(const ModelConfig& config, DType k, DType v);

}  // namespace weft
