// config.json -> ModelConfig. Field names and defaults follow transformers 5.17's configuration
// classes (configuration_qwen3_5.py, configuration_qwen3_5_moe.py, configuration_qwen3_next.py,
// configuration_qwen3.py, configuration_llama.py).
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace weft {

namespace {

using nlohmann::json;

const std::set<std::string> kSupportedTypes = {"qwen3_5_text", "qwen3_5_moe_text", "qwen3_next",
                                               "qwen3", "llama", "qwen3_moe"};

Status get_int(const json& j, const char* key, int64_t* out, bool required, int64_t lo = 1,
               int64_t hi = int64_t(1) << 40) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return required ? Status::error(std::string("config.json: missing '") + key + "'") : Status();
  }
  if (!it->is_number_integer()) return Status::error(std::string("config.json: '") + key + "' is not an integer");
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    return Status::error(std::string("config.json: '") + key + "' = " + std::to_string(v) + " is out of range");
  *out = v;
  return Status();
}

double get_double(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return (it != j.end() && it->is_number()) ? it->get<double>() : fallback;
}

// A string field; absent or null gives the fallback, any other type is an error (json::value
// would throw).
Status get_string(const json& j, const char* key, const std::string& fallback, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = fallback;
    return Status();
  }
  if (!it->is_string()) return Status::error(std::string("config.json: '") + key + "' is not a string");
  *out = it->get<std::string>();
  return Status();
}

bool get_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return (it != j.end() && it->is_boolean()) ? it->get<bool>() : fallback;
}

void read_token_ids(const json& j, const char* key, std::vector<int32_t>* out) {
  auto it = j.find(key);
  if (it == j.end()) return;
  if (it->is_number_integer()) out->push_back(it->get<int32_t>());
  if (it->is_array())
    for (const auto& v : *it)
      if (v.is_number_integer()) out->push_back(v.get<int32_t>());
}

}  // namespace

int64_t ModelConfig::num_full_attention_layers() const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kFullAttention);
}
int64_t ModelConfig::num_linear_attention_layers() const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kLinearAttention);
}

Result<ModelConfig> parse_model_config(const json& root, const json& generation_config) {
  if (!root.is_object()) return Status::error("config.json: not a JSON object");
  ModelConfig c;
  const json* text = &root;
  std::string outer_type;
  WEFT_RETURN_IF_ERROR(get_string(root, "model_type", "", &outer_type));
  c.tensor_prefix = "model.";
  if (root.contains("text_config")) {
    // Multimodal wrappers (qwen3_5, qwen3_5_moe): the text model lives under
    // model.language_model.; model.visual.* and mtp.* are not ours to load.
    if (!root["text_config"].is_object()) return Status::error("config.json: 'text_config' is not an object");
    text = &root["text_config"];
    c.tensor_prefix = "model.language_model.";
  }
  const json& t = *text;
  WEFT_RETURN_IF_ERROR(get_string(t, "model_type", outer_type, &c.model_type));
  if (c.model_type == "qwen3_5") c.model_type = "qwen3_5_text";
  if (c.model_type == "qwen3_5_moe") c.model_type = "qwen3_5_moe_text";
  if (!kSupportedTypes.count(c.model_type))
    return Status::error("config.json: unknown architecture (model_type '" + c.model_type +
                         "'); weft runs qwen3_5(_moe)(_text), qwen3_next, qwen3, qwen3_moe and llama");

  const bool hybrid = c.model_type == "qwen3_5_text" || c.model_type == "qwen3_5_moe_text" ||
                      c.model_type == "qwen3_next";
  WEFT_RETURN_IF_ERROR(get_int(t, "vocab_size", &c.vocab_size, true, 1, int64_t(1) << 24));
  WEFT_RETURN_IF_ERROR(get_int(t, "hidden_size", &c.hidden_size, true, 1, 1 << 18));
  WEFT_RETURN_IF_ERROR(get_int(t, "num_hidden_layers", &c.num_hidden_layers, true, 1, 4096));
  WEFT_RETURN_IF_ERROR(get_int(t, "num_attention_heads", &c.num_attention_heads, true, 1, 4096));
  c.num_key_value_heads = c.num_attention_heads;
  WEFT_RETURN_IF_ERROR(get_int(t, "num_key_value_heads", &c.num_key_value_heads, false, 1, 4096));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return Status::error("config.json: num_attention_heads is not a multiple of num_key_value_heads");
  c.head_dim = c.hidden_size / c.num_attention_heads;
  WEFT_RETURN_IF_ERROR(get_int(t, "head_dim", &c.head_dim, false, 1, 4096));
  c.rms_norm_eps = get_double(t, "rms_norm_eps", 1e-6);
  c.attention_bias = get_bool(t, "attention_bias", false);
  c.tie_word_embeddings = get_bool(t, "tie_word_embeddings", get_bool(root, "tie_word_embeddings", false));
  c.norm_plus_one = hybrid;
  c.attn_output_gate = hybrid && get_bool(t, "attn_output_gate", true);
  c.qk_norm = hybrid || c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  WEFT_RETURN_IF_ERROR(get_int(t, "max_position_embeddings", &c.max_position_embeddings, false));

  // RoPE: transformers 5 keeps it in rope_parameters; older files use top-level keys.
  json rope = t.contains("rope_parameters") && t["rope_parameters"].is_object() ? t["rope_parameters"]
              : t.contains("rope_scaling") && t["rope_scaling"].is_object()   ? t["rope_scaling"]
                                                                                : json::object();
  c.rope_theta = get_double(rope, "rope_theta", get_double(t, "rope_theta", 10000.0));
  // Used as a float base of a power: a value no float holds (or none at all) is an error, not UB.
  if (!(c.rope_theta > 0 && c.rope_theta <= 1e30)) return Status::error("config.json: rope_theta out of (0, 1e30]");
  double partial = get_double(rope, "partial_rotary_factor", get_double(t, "partial_rotary_factor", 1.0));
  if (!(partial > 0 && partial <= 1)) return Status::error("config.json: partial_rotary_factor out of (0, 1]");
  c.rotary_dim = int64_t(double(c.head_dim) * partial);
  if (c.rotary_dim % 2 != 0) return Status::error("config.json: rotary dimension must be even");
  std::string rope_type;
  WEFT_RETURN_IF_ERROR(get_string(rope, "type", "default", &rope_type));
  WEFT_RETURN_IF_ERROR(get_string(rope, "rope_type", rope_type, &rope_type));
  if (rope_type == "llama3") {
    c.rope_llama3_factor = get_double(rope, "factor", 8.0);
    c.rope_llama3_low_freq = get_double(rope, "low_freq_factor", 1.0);
    c.rope_llama3_high_freq = get_double(rope, "high_freq_factor", 4.0);
    const double original_max = get_double(rope, "original_max_position_embeddings", 8192);
    // Checked before the integer cast (a float out of int64's range is UB; found by config_fuzz)
    // and before forward() divides by them.
    if (!(original_max >= 1 && original_max <= double(int64_t(1) << 40)))
      return Status::error("config.json: rope_scaling.original_max_position_embeddings out of [1, 2^40]");
    if (!(c.rope_llama3_factor > 0 && c.rope_llama3_factor <= 1e6) || !(c.rope_llama3_low_freq > 0) ||
        !(c.rope_llama3_high_freq > c.rope_llama3_low_freq) || !(c.rope_llama3_high_freq <= 1e6))
      return Status::error("config.json: llama3 rope_scaling needs 0 < factor, 0 < low_freq_factor < high_freq_factor");
    c.rope_llama3_original_max = int64_t(original_max);
  } else if (rope_type != "default" && rope_type != "mrope") {
    return Status::error("config.json: unsupported rope_type '" + rope_type + "'");
  }

  // Layer kinds: an explicit layer_types list, else the full_attention_interval rule.
  c.layer_kinds.assign(size_t(c.num_hidden_layers), LayerKind::kFullAttention);
  if (hybrid) {
    if (t.contains("layer_types") && t["layer_types"].is_array()) {
      const json& lt = t["layer_types"];
      if (int64_t(lt.size()) != c.num_hidden_layers)
        return Status::error("config.json: layer_types has " + std::to_string(lt.size()) +
                             " entries for " + std::to_string(c.num_hidden_layers) + " layers");
      for (size_t i = 0; i < lt.size(); ++i) {
        std::string kind = lt[i].is_string() ? lt[i].get<std::string>() : "";
        if (kind == "linear_attention") c.layer_kinds[i] = LayerKind::kLinearAttention;
        else if (kind != "full_attention")
          return Status::error("config.json: layer_types[" + std::to_string(i) + "] = '" + kind + "' is unknown");
      }
    } else {
      int64_t interval = 4;
      WEFT_RETURN_IF_ERROR(get_int(t, "full_attention_interval", &interval, false));
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        c.layer_kinds[size_t(i)] = (i + 1) % interval == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention;
    }
    if (c.num_linear_attention_layers() > 0) {
      WEFT_RETURN_IF_ERROR(get_int(t, "linear_num_key_heads", &c.linear_num_key_heads, true));
      WEFT_RETURN_IF_ERROR(get_int(t, "linear_num_value_heads", &c.linear_num_value_heads, true));
      WEFT_RETURN_IF_ERROR(get_int(t, "linear_key_head_dim", &c.linear_key_head_dim, true));
      WEFT_RETURN_IF_ERROR(get_int(t, "linear_value_head_dim", &c.linear_value_head_dim, true));
      WEFT_RETURN_IF_ERROR(get_int(t, "linear_conv_kernel_dim", &c.linear_conv_kernel_dim, false, 1, 64));
      if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
        return Status::error("config.json: linear_num_value_heads is not a multiple of linear_num_key_heads");
    }
    c.gdn_packed_qkvz = c.model_type == "qwen3_next";
  }

  // Feed-forward kinds: MoE where the config has experts (Qwen3-Next / Qwen3-MoE also honour
  // decoder_sparse_step and mlp_only_layers, as their modeling files do).
  WEFT_RETURN_IF_ERROR(get_int(t, "intermediate_size", &c.intermediate_size, false));
  WEFT_RETURN_IF_ERROR(get_int(t, "num_experts", &c.num_experts, false, 0, 1 << 16));
  c.ffn_kinds.assign(size_t(c.num_hidden_layers), FfnKind::kDense);
  if (c.model_type == "qwen3_5_text" || c.model_type == "qwen3" || c.model_type == "llama") c.num_experts = 0;
  if (c.num_experts > 0) {
    WEFT_RETURN_IF_ERROR(get_int(t, "num_experts_per_tok", &c.num_experts_per_tok, true, 1, c.num_experts));
    WEFT_RETURN_IF_ERROR(get_int(t, "moe_intermediate_size", &c.moe_intermediate_size, true));
    WEFT_RETURN_IF_ERROR(get_int(t, "shared_expert_intermediate_size", &c.shared_expert_intermediate_size, false, 0));
    c.norm_topk_prob = get_bool(t, "norm_topk_prob", true);
    int64_t step = 1;
    WEFT_RETURN_IF_ERROR(get_int(t, "decoder_sparse_step", &step, false));
    std::set<int64_t> mlp_only;
    if (t.contains("mlp_only_layers") && t["mlp_only_layers"].is_array())
      for (const auto& v : t["mlp_only_layers"])
        if (v.is_number_integer()) mlp_only.insert(v.get<int64_t>());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      if (!mlp_only.count(i) && (i + 1) % step == 0) c.ffn_kinds[size_t(i)] = FfnKind::kMoe;
  }
  bool any_dense = std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), FfnKind::kDense) > 0;
  if (any_dense && c.intermediate_size <= 0) return Status::error("config.json: missing 'intermediate_size'");

  int64_t bos = -1;
  if (t.contains("bos_token_id") && t["bos_token_id"].is_number_integer()) bos = t["bos_token_id"].get<int64_t>();
  else if (root.contains("bos_token_id") && root["bos_token_id"].is_number_integer()) bos = root["bos_token_id"].get<int64_t>();
  c.bos_token_id = int32_t(bos);
  if (generation_config.is_object()) read_token_ids(generation_config, "eos_token_id", &c.eos_token_ids);
  if (c.eos_token_ids.empty()) read_token_ids(t, "eos_token_id", &c.eos_token_ids);
  if (c.eos_token_ids.empty()) read_token_ids(root, "eos_token_id", &c.eos_token_ids);
  return c;
}

}  // namespace weft
