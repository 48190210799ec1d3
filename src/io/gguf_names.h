// llama.cpp's GGUF naming conventions for the architectures weft runs: which GGUF tensor a
// Hugging Face tensor becomes (and back), what the converter does to its values on the way, and
// the metadata keys of the hyper-parameters. Learned from llama.cpp's gguf-py/gguf/constants.py
// (MODEL_TENSORS, TENSOR_NAMES, Keys), tensor_mapping.py and conversion/{qwen,llama}.py; the
// table is our own.
//
// GGUF arch names: "llama", "qwen3", "qwen3next", "qwen35" (Qwen3.5 dense), "qwen35moe".
// HF names are those of the text model with the "model." prefix (multimodal wrappers'
// "model.language_model." is the caller's to strip).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

// What llama.cpp's converter does to a tensor's values besides renaming; a reader that binds a
// GGUF tensor to a HF role must undo (or account for) exactly these.
enum GgufTransform : unsigned {
  kGgufNoTransform = 0,
  // RMSNorm weights are stored as 1 + w (qwen35/qwen35moe/qwen3next, all norms except the GDN
  // output norm linear_attn.norm): such files use plain x̂·w' with w' = 1 + w.
  kGgufNormPlusOne = 1u << 0,
  // ssm_a = -exp(A_log) (qwen35/qwen35moe/qwen3next).
  kGgufNegExp = 1u << 1,
  // conv1d [C, 1, K] squeezed to [C, K] (ne = {K, C}).
  kGgufSqueeze = 1u << 2,
  // Llama q_proj / k_proj rows permuted from HF's rotate-half RoPE layout to ggml's interleaved
  // pairs: per head, rows reshaped (2, head_dim/2) -> transposed (LlamaModel.permute).
  kGgufLlamaRopePermute = 1u << 3,
  // qwen35/qwen35moe with linear_num_key_heads != linear_num_value_heads: GDN value heads
  // reordered from grouped-by-key-head (HF: g0v0, g0v1, ..., g1v0, ...) to tiled
  // (g0v0, g1v0, ..., g0v1, ...) along the value-head axis (rows of in_proj_qkv's V part,
  // in_proj_z, in_proj_a/b; A_log, dt_bias; conv1d's V channels; out_proj's columns).
  kGgufVHeadTiled = 1u << 4,
  // Per-expert HF tensors (mlp.experts.E.x_proj) stacked into one [E, out, in] tensor.
  kGgufStackExperts = 1u << 5,
  // HF fused experts.gate_up_proj [E, 2I, H] split into ffn_gate_exps (first I rows) and
  // ffn_up_exps.
  kGgufSplitGateUp = 1u << 6,
  // qwen3next in_proj_qkvz, packed per key head [q k v z], regrouped into attn_qkv
  // ([all q | all k | all v]) and attn_gate (all z); in_proj_ba (ssm_ba) is kept packed.
  kGgufSplitQkvz = 1u << 7,
};

struct GgufArchInfo {
  const char* arch;            // GGUF general.architecture
  bool hybrid_gdn;             // Gated DeltaNet layers (ssm_* tensors)
  bool moe;                    // routed experts (ffn_*_exps)
  const char* rope_type;       // llama.cpp's rope mode: "norm" (interleaved pairs), "neox", "imrope"
  const char* post_attn_norm;  // GGUF name of HF post_attention_layernorm
};
// nullptr for an arch weft does not know.
const GgufArchInfo* gguf_arch_info(std::string_view arch);
const std::vector<GgufArchInfo>& gguf_known_archs();

struct GgufNameMapping {
  std::vector<std::string> gguf_names;  // usually one; two for the splits
  unsigned transforms = kGgufNoTransform;
};

// The GGUF tensor(s) that llama.cpp's converter makes of HF tensor `hf_name` for `arch`, or
// nullopt when it has no GGUF counterpart in weft's table (vision, MTP, unknown).
std::optional<GgufNameMapping> gguf_name_for_hf(std::string_view arch, std::string_view hf_name);
// The HF tensor a GGUF tensor comes from (for stacked experts the HF fused-expert name
// "model.layers.L.mlp.experts.gate_proj"), or nullopt when unknown.
std::optional<std::string> hf_name_for_gguf(std::string_view arch, std::string_view gguf_name);

// "{arch}.<suffix>", e.g. gguf_key("qwen35", "attention.head_count_kv").
std::string gguf_key(std::string_view arch, std::string_view suffix);

// The metadata key of each HF config hyper-parameter llama.cpp writes (suffix after "{arch}."),
// e.g. {"num_hidden_layers", "block_count"}. block_count includes MTP layers when
// "{arch}.nextn_predict_layers" is present (decoder layers = block_count - nextn_predict_layers).
struct GgufHparamKey {
  const char* hf;
  const char* gguf_suffix;
};
const std::vector<GgufHparamKey>& gguf_hparam_keys();

}  // namespace weft
