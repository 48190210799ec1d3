// Fuzzes config.json parsing (parse_model_config) with an optional generation_config.json, and
// the byte model computed from a parsed config (what `weft info` prints for a user's directory).
//
// Input: config.json | generation_config.json, cut at kPartSeparator (fuzz_util.h).
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "model/config.h"
#include "model/footprint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts = weft::fuzz::split_parts(data, size, 2);
  // As ModelFiles reads them: invalid JSON is rejected before parse_model_config sees it.
  nlohmann::json config = nlohmann::json::parse(parts[0], nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;
  nlohmann::json generation = nullptr;
  if (!parts[1].empty()) {
    generation = nlohmann::json::parse(parts[1], nullptr, /*allow_exceptions=*/false);
    if (generation.is_discarded()) generation = nullptr;
  }
  auto parsed = weft::parse_model_config(config, generation);
  if (!parsed.ok()) return 0;
  const weft::ModelConfig& c = parsed.value();
  // The promises callers rely on: one kind per layer, and heads that divide into groups.
  if (c.layer_kinds.size() != size_t(c.num_hidden_layers)) std::abort();
  if (c.ffn_kinds.size() != size_t(c.num_hidden_layers)) std::abort();
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) std::abort();
  for (weft::DType t : {weft::DType::kF16, weft::DType::kF32, weft::DType::kQ8_0, weft::DType::kQ4_0})
    (void)weft::kv_bytes_per_token(c, t, t);
  (void)c.gdn_conv_dim();
  return 0;
}
