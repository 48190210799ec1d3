// The named model geometries `weft synth` can fake (SynthSpec), and the checks that keep a
// user-shrunk geometry self-consistent before any byte is written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace weft {

// Everything needed to write a random-weight Hugging Face model directory. Field names follow
// the HF config keys they become. num_experts == 0 means a dense FFN (intermediate_size used).
struct SynthSpec {
  std::string preset;      // the name it came from ("tiny", "qwen3.5-35b-a3b", ...)
  std::string model_type;  // "qwen3_5_moe_text", "qwen3_5_text" or "qwen3_next"

  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t full_attention_interval = 4;  // every 4th layer is full attention, the rest GDN

  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 4;

  int64_t intermediate_size = 0;  // dense FFN (and qwen3_next's config default)
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;

  int64_t vocab_size = 0;
  bool tie_word_embeddings = false;
  // Real tokenizer ids; remapped into range when the vocabulary is shrunk (synth_token_ids).
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 0;

  uint64_t seed = 0;
  DType dtype = DType::kBF16;

  bool is_moe() const { return num_experts > 0; }
  // Qwen3-Next fuses the GDN input projections differently (in_proj_qkvz / in_proj_ba).
  bool is_qwen3_next() const { return model_type == "qwen3_next"; }
  bool is_full_attention(int64_t layer) const {
    return (layer + 1) % full_attention_interval == 0;
  }
  int64_t num_full_attention_layers() const { return num_hidden_layers / full_attention_interval; }
};

// The preset names, in the order `--help` lists them.
const std::vector<std::string>& synth_preset_names();
// One line describing a preset (for --help); empty for unknown names.
std::string synth_preset_summary(const std::string& name);
// The real geometry of a named preset, seed 0, bf16.
Result<SynthSpec> synth_preset(const std::string& name);

// User shrink-overrides from the command line; -1 means the flag was not given.
struct SynthOverrides {
  int64_t layers = -1;
  int64_t experts = -1;
  int64_t vocab = -1;
  int64_t hidden = -1;
};
// Applies overrides (an error names the bad flag: zero/negative sizes, --experts on a dense
// preset). Shrinking experts below top-k lowers top-k to the expert count.
Status synth_apply_overrides(SynthSpec* spec, const SynthOverrides& o);
// Checks a spec is writable: positive sizes, known model_type, top-k <= experts, float dtype.
Status synth_validate(const SynthSpec& spec);
// bos/eos ids valid for spec.vocab_size: the preset's ids when they fit, else the last two ids.
void synth_token_ids(const SynthSpec& spec, int64_t* bos, int64_t* eos);

}  // namespace weft
