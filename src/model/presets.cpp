// The named geometries of `weft synth` and the validation of shrink-overrides.
#include "model/presets.h"

#include <algorithm>

namespace weft {

namespace {

// Qwen3.5-35B-A3B (hybrid GDN + gated attention, MoE). 10 of 40 layers are full attention, so
// the bf16 KV cache costs 10 layers x 2 (K,V) x 2 KV heads x 256 x 2 B = 20,480 B per token.
SynthSpec qwen35_35b_a3b() {
  SynthSpec s;
  s.preset = "qwen3.5-35b-a3b";
  s.model_type = "qwen3_5_moe_text";
  s.hidden_size = 2048;
  s.num_hidden_layers = 40;
  s.num_attention_heads = 16;
  s.num_key_value_heads = 2;
  s.head_dim = 256;
  s.linear_num_key_heads = 16;
  s.linear_num_value_heads = 32;
  s.linear_key_head_dim = 128;
  s.linear_value_head_dim = 128;
  s.num_experts = 256;
  s.num_experts_per_tok = 8;
  s.moe_intermediate_size = 512;
  s.shared_expert_intermediate_size = 512;
  s.vocab_size = 248320;
  s.tie_word_embeddings = false;
  s.bos_token_id = 248044;  // <|endoftext|>
  s.eos_token_id = 248046;  // <|im_end|>
  return s;
}

// Qwen3-Next-80B-A3B: same hybrid layout, 512 experts top-10, the Qwen3 vocabulary.
SynthSpec qwen3_next_80b_a3b() {
  SynthSpec s;
  s.preset = "qwen3-next-80b-a3b";
  s.model_type = "qwen3_next";
  s.hidden_size = 2048;
  s.num_hidden_layers = 48;
  s.num_attention_heads = 16;
  s.num_key_value_heads = 2;
  s.head_dim = 256;
  s.linear_num_key_heads = 16;
  s.linear_num_value_heads = 32;
  s.linear_key_head_dim = 128;
  s.linear_value_head_dim = 128;
  s.intermediate_size = 5632;  // unused (every layer is MoE) but part of the real config
  s.num_experts = 512;
  s.num_experts_per_tok = 10;
  s.moe_intermediate_size = 512;
  s.shared_expert_intermediate_size = 512;
  s.vocab_size = 151936;
  s.tie_word_embeddings = false;
  s.bos_token_id = 151643;
  s.eos_token_id = 151645;
  return s;
}

// Qwen3.5-2B, dense FFN, tied embeddings. APPROXIMATE geometry: our best reading of the small
// dense Qwen3.5, good enough for benchmarking shapes, not a claim about the released model.
SynthSpec qwen35_2b() {
  SynthSpec s;
  s.preset = "qwen3.5-2b";
  s.model_type = "qwen3_5_text";
  s.hidden_size = 2048;
  s.num_hidden_layers = 24;
  s.num_attention_heads = 8;
  s.num_key_value_heads = 2;
  s.head_dim = 256;
  s.linear_num_key_heads = 16;
  s.linear_num_value_heads = 16;
  s.linear_key_head_dim = 128;
  s.linear_value_head_dim = 128;
  s.intermediate_size = 6144;
  s.vocab_size = 248320;
  s.tie_word_embeddings = true;
  s.bos_token_id = 248044;
  s.eos_token_id = 248046;
  return s;
}

// A few-MB Qwen3.5-MoE-shaped model that writes in well under a second: the smoke-test default.
SynthSpec tiny() {
  SynthSpec s;
  s.preset = "tiny";
  s.model_type = "qwen3_5_moe_text";
  s.hidden_size = 256;
  s.num_hidden_layers = 4;
  s.num_attention_heads = 4;
  s.num_key_value_heads = 2;
  s.head_dim = 64;
  s.linear_num_key_heads = 2;
  s.linear_num_value_heads = 4;
  s.linear_key_head_dim = 32;
  s.linear_value_head_dim = 32;
  s.num_experts = 8;
  s.num_experts_per_tok = 2;
  s.moe_intermediate_size = 64;
  s.shared_expert_intermediate_size = 64;
  s.vocab_size = 1024;
  s.tie_word_embeddings = false;
  s.bos_token_id = 1022;
  s.eos_token_id = 1023;
  return s;
}

struct PresetEntry {
  const char* name;
  const char* summary;
  SynthSpec (*make)();
};

const PresetEntry kPresets[] = {
    {"tiny", "qwen3_5_moe_text, H 256, 4 layers, 8 experts top-2, vocab 1024 (smoke tests)", tiny},
    {"qwen3.5-35b-a3b", "qwen3_5_moe_text, H 2048, 40 layers, 256 experts top-8, vocab 248320",
     qwen35_35b_a3b},
    {"qwen3-next-80b-a3b", "qwen3_next, H 2048, 48 layers, 512 experts top-10, vocab 151936",
     qwen3_next_80b_a3b},
    {"qwen3.5-2b", "qwen3_5_text dense, H 2048, 24 layers, FFN 6144, tied (approximate geometry)",
     qwen35_2b},
};

}  // namespace

const std::vector<std::string>& synth_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : kPresets) v.push_back(p.name);
    return v;
  }();
  return names;
}

std::string synth_preset_summary(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return p.summary;
  }
  return "";
}

Result<SynthSpec> synth_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return p.make();
  }
  std::string known;
  for (const auto& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  return Status::error("unknown preset '" + name + "' (known: " + known + ")");
}

Status synth_apply_overrides(SynthSpec* spec, const SynthOverrides& o) {
  auto check = [](const char* flag, int64_t v, int64_t lo) -> Status {
    if (v != -1 && v < lo) {
      return Status::error(std::string(flag) + " must be >= " + std::to_string(lo) + ", got " +
                           std::to_string(v));
    }
    return Status::ok_status();
  };
  WEFT_RETURN_IF_ERROR(check("--layers", o.layers, 1));
  WEFT_RETURN_IF_ERROR(check("--experts", o.experts, 1));
  WEFT_RETURN_IF_ERROR(check("--vocab", o.vocab, 2));  // room for distinct bos and eos
  WEFT_RETURN_IF_ERROR(check("--hidden", o.hidden, 1));
  if (o.experts != -1 && !spec->is_moe()) {
    return Status::error("--experts given but preset '" + spec->preset + "' has a dense FFN");
  }
  if (o.layers != -1) spec->num_hidden_layers = o.layers;
  if (o.vocab != -1) spec->vocab_size = o.vocab;
  if (o.hidden != -1) spec->hidden_size = o.hidden;
  if (o.experts != -1) {
    spec->num_experts = o.experts;
    spec->num_experts_per_tok = std::min(spec->num_experts_per_tok, o.experts);
  }
  return synth_validate(*spec);
}

Status synth_validate(const SynthSpec& s) {
  if (s.model_type != "qwen3_5_moe_text" && s.model_type != "qwen3_5_text" &&
      s.model_type != "qwen3_next") {
    return Status::error("unsupported model_type '" + s.model_type + "'");
  }
  const std::pair<const char*, int64_t> positive[] = {
      {"hidden_size", s.hidden_size},
      {"num_hidden_layers", s.num_hidden_layers},
      {"num_attention_heads", s.num_attention_heads},
      {"num_key_value_heads", s.num_key_value_heads},
      {"head_dim", s.head_dim},
      {"full_attention_interval", s.full_attention_interval},
      {"linear_num_key_heads", s.linear_num_key_heads},
      {"linear_num_value_heads", s.linear_num_value_heads},
      {"linear_key_head_dim", s.linear_key_head_dim},
      {"linear_value_head_dim", s.linear_value_head_dim},
      {"linear_conv_kernel_dim", s.linear_conv_kernel_dim},
      {"vocab_size", s.vocab_size},
  };
  for (const auto& [name, v] : positive) {
    if (v <= 0) return Status::error(std::string(name) + " must be positive, got " + std::to_string(v));
  }
  if (s.vocab_size < 2) return Status::error("vocab_size must be >= 2");
  if (s.num_attention_heads % s.num_key_value_heads != 0) {
    return Status::error("num_attention_heads must be a multiple of num_key_value_heads");
  }
  if (s.linear_num_value_heads % s.linear_num_key_heads != 0) {
    return Status::error("linear_num_value_heads must be a multiple of linear_num_key_heads");
  }
  if (s.is_moe()) {
    if (s.num_experts_per_tok < 1 || s.num_experts_per_tok > s.num_experts) {
      return Status::error("num_experts_per_tok must be in [1, num_experts]");
    }
    if (s.moe_intermediate_size <= 0 || s.shared_expert_intermediate_size <= 0) {
      return Status::error("moe_intermediate_size and shared_expert_intermediate_size must be positive");
    }
  } else {
    if (s.model_type != "qwen3_5_text") {
      return Status::error(s.model_type + " needs num_experts > 0");
    }
    if (s.intermediate_size <= 0) return Status::error("intermediate_size must be positive");
  }
  if (s.dtype != DType::kBF16 && s.dtype != DType::kF16 && s.dtype != DType::kF32) {
    return Status::error(std::string("unsupported weight dtype ") + dtype_name(s.dtype));
  }
  return Status::ok_status();
}

void synth_token_ids(const SynthSpec& s, int64_t* bos, int64_t* eos) {
  if (s.bos_token_id < s.vocab_size && s.eos_token_id < s.vocab_size) {
    *bos = s.bos_token_id;
    *eos = s.eos_token_id;
  } else {
    *bos = s.vocab_size - 2;
    *eos = s.vocab_size - 1;
  }
}

}  // namespace weft
