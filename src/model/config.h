// ModelConfig: the hyper-parameters of one checkpoint, read from its config.json, named as the
// Hugging Face config names them. Architecture differences are turned into properties here, once
// (norm_plus_one, attn_output_gate, per-layer kinds), so no code below asks "which architecture?".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace weft {

enum class LayerKind : uint8_t { kFullAttention, kLinearAttention };
enum class FfnKind : uint8_t { kDense, kMoe };

struct ModelConfig {
  std::string model_type;      // of the text model, e.g. "qwen3_5_moe_text", "qwen3_next", "llama"
  std::string tensor_prefix;   // "model." or "model.language_model." (multimodal wrappers)

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  // RMSNorm output x̂·(1+w) (Qwen3.5 / Qwen3-Next: Qwen3_5RMSNorm) instead of x̂·w (Llama, Qwen3).
  bool norm_plus_one = false;

  // Full attention.
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  bool attention_bias = false;
  bool attn_output_gate = false;  // q_proj yields per head [query | gate]; out *= sigmoid(gate)
  bool qk_norm = false;           // per-head RMSNorm of q and k before RoPE
  double rope_theta = 10000.0;
  int64_t rotary_dim = 0;         // first rotary_dim dims of each head are rotated (rotate-half)
  // Llama-3 frequency scaling ("rope_type": "llama3"); factor 0 = off.
  double rope_llama3_factor = 0, rope_llama3_low_freq = 1, rope_llama3_high_freq = 4;
  int64_t rope_llama3_original_max = 8192;

  // Gated DeltaNet (linear attention).
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 4;
  bool gdn_packed_qkvz = false;   // Qwen3-Next: in_proj_qkvz / in_proj_ba grouped per key head

  // Feed-forward.
  int64_t intermediate_size = 0;
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;

  std::vector<LayerKind> layer_kinds;  // [num_hidden_layers]
  std::vector<FfnKind> ffn_kinds;      // [num_hidden_layers]

  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  int64_t max_position_embeddings = 0;

  int64_t num_full_attention_layers() const;
  int64_t num_linear_attention_layers() const;
  int64_t gdn_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int64_t gdn_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int64_t gdn_conv_dim() const { return 2 * gdn_key_dim() + gdn_value_dim(); }
};

// Parses a config.json object (a text config or a multimodal wrapper with "text_config").
// generation_config (may be null) supplies eos ids when present. Every unsupported or
// inconsistent value is an error naming the field.
Result<ModelConfig> parse_model_config(const nlohmann::json& config,
                                       const nlohmann::json& generation_config = nullptr);

}  // namespace weft
