// The HF <-> GGUF tensor-name table of gguf_names.h.
#include "io/gguf_names.h"

#include <cstring>

namespace weft {

namespace {

// Arch sets, as bits, so one table row can serve several archs.
enum : unsigned {
  kLlama = 1u << 0,
  kQwen3 = 1u << 1,
  kQwen3Next = 1u << 2,
  kQwen35 = 1u << 3,
  kQwen35Moe = 1u << 4,
  kAll = 0x1f,
  kHybrid = kQwen3Next | kQwen35 | kQwen35Moe,
  kQwen35Any = kQwen35 | kQwen35Moe,
  kMoe = kQwen3Next | kQwen35Moe,
  kDense = kLlama | kQwen3 | kQwen35,
};

const std::vector<GgufArchInfo> kArchs = {
    {"llama", false, false, "norm", "ffn_norm"},
    {"qwen3", false, false, "neox", "ffn_norm"},
    {"qwen3next", true, true, "neox", "post_attention_norm"},
    {"qwen35", true, false, "imrope", "post_attention_norm"},
    {"qwen35moe", true, true, "imrope", "post_attention_norm"},
};

unsigned arch_bit(std::string_view arch) {
  for (size_t i = 0; i < kArchs.size(); ++i)
    if (arch == kArchs[i].arch) return 1u << i;
  return 0;
}

// One row: HF suffix (after "model.layers.L." for per-layer rows, or the whole name), GGUF
// suffix (after "blk.L."), second GGUF name for splits, archs, transforms. Transforms that apply
// only to some archs are listed per arch set in separate rows.
struct Row {
  bool per_layer;
  const char* hf;
  const char* gguf;
  const char* gguf2;
  unsigned archs;
  unsigned transforms;
};

const Row kRows[] = {
    // Whole-model tensors.
    {false, "model.embed_tokens.weight", "token_embd.weight", nullptr, kAll, 0},
    {false, "model.norm.weight", "output_norm.weight", nullptr, kLlama | kQwen3, 0},
    {false, "model.norm.weight", "output_norm.weight", nullptr, kHybrid, kGgufNormPlusOne},
    {false, "lm_head.weight", "output.weight", nullptr, kAll, 0},
    // Norms.
    {true, "input_layernorm.weight", "attn_norm.weight", nullptr, kLlama | kQwen3, 0},
    {true, "input_layernorm.weight", "attn_norm.weight", nullptr, kHybrid, kGgufNormPlusOne},
    {true, "post_attention_layernorm.weight", "ffn_norm.weight", nullptr, kLlama | kQwen3, 0},
    {true, "post_attention_layernorm.weight", "post_attention_norm.weight", nullptr, kHybrid, kGgufNormPlusOne},
    // Full attention.
    {true, "self_attn.q_proj.weight", "attn_q.weight", nullptr, kLlama, kGgufLlamaRopePermute},
    {true, "self_attn.k_proj.weight", "attn_k.weight", nullptr, kLlama, kGgufLlamaRopePermute},
    {true, "self_attn.q_proj.weight", "attn_q.weight", nullptr, kQwen3 | kHybrid, 0},  // qwen35/next: [q | gate] per head
    {true, "self_attn.k_proj.weight", "attn_k.weight", nullptr, kQwen3 | kHybrid, 0},
    {true, "self_attn.v_proj.weight", "attn_v.weight", nullptr, kAll, 0},
    {true, "self_attn.o_proj.weight", "attn_output.weight", nullptr, kAll, 0},
    {true, "self_attn.q_proj.bias", "attn_q.bias", nullptr, kLlama, kGgufLlamaRopePermute},
    {true, "self_attn.k_proj.bias", "attn_k.bias", nullptr, kLlama, kGgufLlamaRopePermute},
    {true, "self_attn.v_proj.bias", "attn_v.bias", nullptr, kLlama, 0},
    {true, "self_attn.q_norm.weight", "attn_q_norm.weight", nullptr, kQwen3, 0},
    {true, "self_attn.k_norm.weight", "attn_k_norm.weight", nullptr, kQwen3, 0},
    {true, "self_attn.q_norm.weight", "attn_q_norm.weight", nullptr, kHybrid, kGgufNormPlusOne},
    {true, "self_attn.k_norm.weight", "attn_k_norm.weight", nullptr, kHybrid, kGgufNormPlusOne},
    // Dense MLP.
    {true, "mlp.gate_proj.weight", "ffn_gate.weight", nullptr, kAll, 0},  // MoE archs: mlp_only_layers
    {true, "mlp.up_proj.weight", "ffn_up.weight", nullptr, kAll, 0},
    {true, "mlp.down_proj.weight", "ffn_down.weight", nullptr, kAll, 0},
    // MoE: router, stacked experts, shared expert.
    {true, "mlp.gate.weight", "ffn_gate_inp.weight", nullptr, kMoe, 0},
    {true, "mlp.experts.gate_up_proj", "ffn_gate_exps.weight", "ffn_up_exps.weight", kMoe, kGgufSplitGateUp},
    {true, "mlp.experts.gate_proj", "ffn_gate_exps.weight", nullptr, kMoe, 0},
    {true, "mlp.experts.up_proj", "ffn_up_exps.weight", nullptr, kMoe, 0},
    {true, "mlp.experts.down_proj", "ffn_down_exps.weight", nullptr, kMoe, 0},
    {true, "mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", nullptr, kMoe, 0},
    {true, "mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", nullptr, kMoe, 0},
    {true, "mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", nullptr, kMoe, 0},
    {true, "mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", nullptr, kMoe, 0},
    // Gated DeltaNet, Qwen3.5 layout (value heads tiled when n_k != n_v).
    {true, "linear_attn.in_proj_qkv.weight", "attn_qkv.weight", nullptr, kQwen35Any, kGgufVHeadTiled},
    {true, "linear_attn.in_proj_z.weight", "attn_gate.weight", nullptr, kQwen35Any, kGgufVHeadTiled},
    {true, "linear_attn.in_proj_a.weight", "ssm_alpha.weight", nullptr, kQwen35Any, kGgufVHeadTiled},
    {true, "linear_attn.in_proj_b.weight", "ssm_beta.weight", nullptr, kQwen35Any, kGgufVHeadTiled},
    {true, "linear_attn.A_log", "ssm_a", nullptr, kQwen35Any, kGgufNegExp | kGgufVHeadTiled},
    {true, "linear_attn.dt_bias", "ssm_dt.bias", nullptr, kQwen35Any, kGgufVHeadTiled},
    {true, "linear_attn.conv1d.weight", "ssm_conv1d.weight", nullptr, kQwen35Any, kGgufSqueeze | kGgufVHeadTiled},
    {true, "linear_attn.out_proj.weight", "ssm_out.weight", nullptr, kQwen35Any, kGgufVHeadTiled},
    // Gated DeltaNet, Qwen3-Next layout (packed per key head; no V-head reorder).
    {true, "linear_attn.in_proj_qkvz.weight", "attn_qkv.weight", "attn_gate.weight", kQwen3Next, kGgufSplitQkvz},
    {true, "linear_attn.in_proj_ba.weight", "ssm_ba.weight", nullptr, kQwen3Next, 0},
    {true, "linear_attn.A_log", "ssm_a", nullptr, kQwen3Next, kGgufNegExp},
    {true, "linear_attn.dt_bias", "ssm_dt.bias", nullptr, kQwen3Next, 0},
    {true, "linear_attn.conv1d.weight", "ssm_conv1d.weight", nullptr, kQwen3Next, kGgufSqueeze},
    {true, "linear_attn.out_proj.weight", "ssm_out.weight", nullptr, kQwen3Next, 0},
    // The GDN output norm keeps plain w (RMSNormGated): no +1.
    {true, "linear_attn.norm.weight", "ssm_norm.weight", nullptr, kHybrid, 0},
};

// "model.layers.<L>.<rest>" -> (L, rest); false for other names.
bool split_hf_layer(std::string_view name, std::string* layer, std::string_view* rest) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  for (size_t i = 0; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  *layer = std::string(name.substr(0, dot));
  *rest = name.substr(dot + 1);
  return true;
}

// "blk.<L>.<rest>" -> (L, rest).
bool split_gguf_layer(std::string_view name, std::string* layer, std::string_view* rest) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  for (size_t i = 0; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  *layer = std::string(name.substr(0, dot));
  *rest = name.substr(dot + 1);
  return true;
}

// Per-expert HF names "mlp.experts.<E>.<x>_proj.weight" -> "mlp.experts.<x>_proj".
bool per_expert_to_fused(std::string_view rest, std::string* fused) {
  constexpr std::string_view kPrefix = "mlp.experts.";
  if (rest.substr(0, kPrefix.size()) != kPrefix) return false;
  rest.remove_prefix(kPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  for (size_t i = 0; i < dot; ++i)
    if (rest[i] < '0' || rest[i] > '9') return false;
  std::string_view proj = rest.substr(dot + 1);
  constexpr std::string_view kWeight = ".weight";
  if (proj.size() <= kWeight.size() || proj.substr(proj.size() - kWeight.size()) != kWeight) return false;
  *fused = std::string(kPrefix) + std::string(proj.substr(0, proj.size() - kWeight.size()));
  return true;
}

}  // namespace

const GgufArchInfo* gguf_arch_info(std::string_view arch) {
  for (const auto& a : kArchs)
    if (arch == a.arch) return &a;
  return nullptr;
}

const std::vector<GgufArchInfo>& gguf_known_archs() { return kArchs; }

std::optional<GgufNameMapping> gguf_name_for_hf(std::string_view arch, std::string_view hf_name) {
  const unsigned bit = arch_bit(arch);
  if (bit == 0) return std::nullopt;
  std::string layer, fused;
  std::string_view rest;
  const bool per_layer = split_hf_layer(hf_name, &layer, &rest);
  unsigned extra = 0;
  if (per_layer && per_expert_to_fused(rest, &fused)) {
    rest = fused;
    extra = kGgufStackExperts;
  }
  // Stacked fused experts may come with or without ".weight" (transformers 5 writes neither).
  std::string rest_no_weight;
  if (per_layer && rest.substr(0, 12) == "mlp.experts." && rest.size() > 7 && rest.substr(rest.size() - 7) == ".weight") {
    rest_no_weight = std::string(rest.substr(0, rest.size() - 7));
    rest = rest_no_weight;
  }
  for (const Row& r : kRows) {
    if (!(r.archs & bit) || r.per_layer != per_layer) continue;
    if ((per_layer ? rest : hf_name) != r.hf) continue;
    GgufNameMapping m;
    m.transforms = r.transforms | extra;
    const std::string prefix = per_layer ? "blk." + layer + "." : "";
    m.gguf_names.push_back(prefix + r.gguf);
    if (r.gguf2) m.gguf_names.push_back(prefix + r.gguf2);
    return m;
  }
  return std::nullopt;
}

std::optional<std::string> hf_name_for_gguf(std::string_view arch, std::string_view gguf_name) {
  const unsigned bit = arch_bit(arch);
  if (bit == 0) return std::nullopt;
  std::string layer;
  std::string_view rest;
  const bool per_layer = split_gguf_layer(gguf_name, &layer, &rest);
  for (const Row& r : kRows) {
    if (!(r.archs & bit) || r.per_layer != per_layer) continue;
    if ((per_layer ? rest : gguf_name) != r.gguf && !(r.gguf2 && rest == r.gguf2)) continue;
    // A split target maps back to the fused HF tensor; prefer the unsplit row when one exists
    // (ffn_gate_exps comes from experts.gate_proj as well as from experts.gate_up_proj).
    if (r.transforms & kGgufSplitGateUp) continue;
    return per_layer ? "model.layers." + layer + "." + r.hf : std::string(r.hf);
  }
  return std::nullopt;
}

std::string gguf_key(std::string_view arch, std::string_view suffix) {
  return std::string(arch) + "." + std::string(suffix);
}

const std::vector<GgufHparamKey>& gguf_hparam_keys() {
  static const std::vector<GgufHparamKey> kKeys = {
      {"max_position_embeddings", "context_length"},
      {"hidden_size", "embedding_length"},
      {"num_hidden_layers", "block_count"},
      {"intermediate_size", "feed_forward_length"},
      {"num_attention_heads", "attention.head_count"},
      {"num_key_value_heads", "attention.head_count_kv"},
      {"head_dim", "attention.key_length"},  // and attention.value_length
      {"rms_norm_eps", "attention.layer_norm_rms_epsilon"},
      {"rope_theta", "rope.freq_base"},
      {"partial_rotary_factor", "rope.dimension_count"},  // written as head_dim * factor
      {"mrope_section", "rope.dimension_sections"},       // qwen35*: 4 entries, default [11, 11, 10, 0]
      {"num_experts", "expert_count"},
      {"num_experts_per_tok", "expert_used_count"},
      {"moe_intermediate_size", "expert_feed_forward_length"},
      {"shared_expert_intermediate_size", "expert_shared_feed_forward_length"},
      {"linear_conv_kernel_dim", "ssm.conv_kernel"},
      {"linear_key_head_dim", "ssm.state_size"},
      {"linear_num_key_heads", "ssm.group_count"},
      {"linear_num_value_heads", "ssm.time_step_rank"},
      {"linear_value_head_dim", "ssm.inner_size"},  // written as value_head_dim * num_value_heads
      {"full_attention_interval", "full_attention_interval"},
      {"vocab_size", "vocab_size"},
      {"mtp_num_hidden_layers", "nextn_predict_layers"},
  };
  return kKeys;
}

}  // namespace weft
