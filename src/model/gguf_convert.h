// Hugging Face checkpoint -> GGUF file (what `weft convert` writes) and GGUF -> GGUF with other
// weight types (`weft quantize`), laid out as llama.cpp's converter and quantizer do: its tensor
// names and reorders (io/gguf_names.h, io/gguf_layout.h), its hyper-parameter keys, the
// tokenizer as tokenizer.ggml.* metadata, and its per-tensor type mixes for q4_k_m / q5_k_m.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/quant_types.h"
#include "core/status.h"

namespace weft {

// A weight type scheme: one type for the big matrices, or llama.cpp's K-quant mixes.
enum class WeightScheme { kKeep, kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ6_K, kQ4_K_M, kQ5_K_M };
// "keep" (the checkpoint's own type), "f32", "f16", "bf16", "q8_0", "q4_0", "q6_k", "q4_k_m",
// "q5_k_m"; an error lists them.
Result<WeightScheme> parse_weight_scheme(const std::string& name);
const char* weight_scheme_name(WeightScheme s);

// Where a matrix sits in the model, for the mix rules.
struct TensorRole {
  std::string gguf_name;     // e.g. "blk.3.ffn_down.weight"
  int64_t layer = -1;        // -1 for whole-model tensors
  int64_t n_layers = 0;
  int64_t i_attn_v = 0;      // index of this tensor among the attn_v-like ones (attn_v, attn_qkv), file order
  int64_t n_attn_v = 0;      // how many attn_v-like tensors the model has
  int64_t n_experts = 0;
  bool tied_output = false;  // token_embd that also serves as the output head
};
// The type a 2-D weight gets under `scheme` (llama.cpp's llama_tensor_get_type rules for the
// types weft has, learned from src/llama-quant.cpp). `source` is the checkpoint's type; `cols`
// its row length: a type whose block does not divide it falls back to q8_0, then to f16/`source`.
GgmlType weight_type_for(WeightScheme scheme, const TensorRole& role, GgmlType source, int64_t cols);

// Called after each tensor is encoded: its GGUF name, the work done and the work in all (0 while
// unknown). convert_hf_to_gguf counts source bytes converted (its last call, before the file is
// written, has done == total); quantize_gguf counts tensors. For progress lines on long runs.
using ConvertProgress = std::function<void(const std::string& tensor, int64_t done, int64_t total)>;

// Converts the HF model directory `hf_dir` into `out_path` (atomic write). `threads`: how many
// cores quantize the rows (0 = all); the file's bytes do not depend on it.
Status convert_hf_to_gguf(const std::string& hf_dir, const std::string& out_path, WeightScheme scheme,
                          const ConvertProgress& progress = {}, int threads = 0);
// Rewrites a GGUF model with the weight matrices in `scheme`'s types (from their dequantized
// values); metadata and small tensors are copied unchanged. `threads` as for convert_hf_to_gguf.
Status quantize_gguf(const std::string& in_path, const std::string& out_path, WeightScheme scheme,
                     const ConvertProgress& progress = {}, int threads = 0);

}  // namespace weft
