// The weights of one model, bound by role. Matrices are views into the memory-mapped files in
// their stored dtype (Linear layout [out_features, in_features]); the small per-channel vectors
// (norm weights, A_log, dt_bias, biases) are copied to f32 once at load.
#pragma once

#include <cstdint>
#include <vector>

#include "core/matrix.h"
#include "model/config.h"

namespace weft {

struct AttentionWeights {
  Matrix q_proj;  // [heads * head_dim * (gated ? 2 : 1), H]
  Matrix k_proj, v_proj;  // [kv_heads * head_dim, H]
  Matrix o_proj;  // [H, heads * head_dim]
  std::vector<float> q_bias, k_bias, v_bias;  // empty unless attention_bias
  std::vector<float> q_norm, k_norm;           // [head_dim], empty unless qk_norm
};

struct GdnWeights {
  // Qwen3.5 layout: in_proj_qkv [2*key_dim + value_dim, H], in_proj_z [value_dim, H],
  // in_proj_b / in_proj_a [n_v, H]. Qwen3-Next: in_proj_qkvz / in_proj_ba packed per key head.
  Matrix in_proj_qkv, in_proj_z, in_proj_b, in_proj_a;
  Matrix in_proj_qkvz, in_proj_ba;
  std::vector<float> conv1d;   // [conv_dim, kernel]
  std::vector<float> a_log;    // [n_v]
  std::vector<float> dt_bias;  // [n_v]
  std::vector<float> norm;     // [value_head_dim], plain w (RMSNormGated)
  Matrix out_proj;             // [H, value_dim]
  // Empty: out_proj's columns are in value-head order. Else column chunk i (one value head
  // wide) multiplies value head out_proj_head_order[i] (GGUF files whose blocks straddle heads).
  std::vector<int32_t> out_proj_head_order;
};

struct ExpertWeights {
  Matrix gate_proj, up_proj;  // [I, H] each (slices of a fused gate_up_proj when fused)
  Matrix down_proj;           // [H, I]
};

struct FfnWeights {
  // Dense MLP, or MoE routed experts plus an optional shared expert.
  ExpertWeights dense;
  Matrix router;  // [E, H]
  std::vector<ExpertWeights> experts;
  // The same routed experts as one table per projection ([E] each), the operand of the grouped
  // matmul (Backend::grouped_matmul); filled at binding from `experts`.
  std::vector<Matrix> expert_gate, expert_up, expert_down;
  bool has_shared_expert = false;
  ExpertWeights shared_expert;
  Matrix shared_expert_gate;  // [1, H]
};

struct LayerWeights {
  LayerKind kind = LayerKind::kFullAttention;
  FfnKind ffn_kind = FfnKind::kDense;
  std::vector<float> input_layernorm, post_attention_layernorm;  // [H]
  AttentionWeights attn;  // when kind == kFullAttention
  GdnWeights gdn;         // when kind == kLinearAttention
  FfnWeights ffn;
};

struct ModelWeights {
  Matrix embed_tokens;  // [V, H]
  Matrix lm_head;       // [V, H] (the embedding when tied)
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
};

}  // namespace weft
