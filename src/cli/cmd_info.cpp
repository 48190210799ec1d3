// `weft info`: what a checkpoint is and what it costs — architecture, layer mix, parameters
// (total and active per token), weight bytes, and the cache table per KV type and context.
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/cpu_features.h"
#include "io/json_text.h"
#include "model/footprint.h"

namespace weft::cli {
namespace {

std::vector<int64_t> parse_ctx_list(const std::string& s, Status* status) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long long v = std::stoll(item, &used);
      int64_t mult = 1;
      std::string rest = item.substr(used);
      if (rest == "K" || rest == "k") mult = 1024;
      else if (!rest.empty()) throw std::invalid_argument(item);
      if (v <= 0) throw std::invalid_argument(item);
      out.push_back(v * mult);
    } catch (const std::exception&) {
      *status = Status::error("--ctx: '" + item + "' is not a positive context length");
      return {};
    }
  }
  return out;
}

int run_info(int argc, char** argv) {
  CLI::App app("Describe a model: architecture, parameters, and cache bytes per context token", "info");
  std::string model_dir, ctx = "8192,32768,65536,262144";
  bool json = false;
  app.add_option("-m,--model", model_dir, "model directory (HF format); default: the built-in model");
  app.add_option("--ctx", ctx, "context lengths for the cache table (comma separated; 32K allowed)");
  app.add_flag("--json", json, "print JSON");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  Status st;
  std::vector<int64_t> ctxs = parse_ctx_list(ctx, &st);
  if (!st.ok()) return fail(st);
  auto model = open_model(&model_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& c = model.value()->config();
  const Footprint fp = compute_footprint(*model.value());
  const DType types[] = {DType::kF16, DType::kQ8_0, DType::kQ4_0};

  if (json) {
    nlohmann::json j;
    j["model_type"] = c.model_type;
    j["layers"] = c.num_hidden_layers;
    j["full_attention_layers"] = fp.full_attention_layers;
    j["linear_attention_layers"] = fp.linear_attention_layers;
    j["total_params"] = fp.total_params;
    j["active_params"] = fp.active_params;
    j["total_weight_bytes"] = fp.total_weight_bytes;
    j["active_weight_bytes_per_token"] = fp.active_weight_bytes;
    j["gdn_state_bytes"] = fp.gdn_state_bytes;
    for (const auto& [type, bytes] : fp.weight_bytes_by_type) j["weight_bytes_by_type"][type] = bytes;
    j["kernels"] = "cpu: " + kernel_path_description();
    for (DType t : types) {
      if (!kv_type_supported(t, c.head_dim)) continue;
      nlohmann::json e;
      e["bytes_per_token"] = kv_bytes_per_token(c, t, t);
      for (int64_t n : ctxs) e["kv_bytes"][std::to_string(n)] = kv_bytes_per_token(c, t, t) * uint64_t(n);
      j["cache"][dtype_name(t)] = e;
    }
    std::printf("%s\n", json_text(j, 2).c_str());
    return 0;
  }
  std::printf("model          %s\n", model_dir.c_str());
  std::printf("architecture   %s (%lld layers: %lld full attention, %lld Gated DeltaNet)\n", c.model_type.c_str(),
              (long long)c.num_hidden_layers, (long long)fp.full_attention_layers, (long long)fp.linear_attention_layers);
  std::printf("hidden         %lld, vocab %lld, %s embeddings\n", (long long)c.hidden_size, (long long)c.vocab_size,
              c.tie_word_embeddings ? "tied" : "untied");
  std::printf("attention      %lld query heads, %lld KV heads, head_dim %lld, rotary dims %lld%s\n",
              (long long)c.num_attention_heads, (long long)c.num_key_value_heads, (long long)c.head_dim,
              (long long)c.rotary_dim, c.attn_output_gate ? ", output gate" : "");
  if (fp.linear_attention_layers)
    std::printf("gated deltanet %lld key heads x %lld, %lld value heads x %lld, conv %lld\n",
                (long long)c.linear_num_key_heads, (long long)c.linear_key_head_dim, (long long)c.linear_num_value_heads,
                (long long)c.linear_value_head_dim, (long long)c.linear_conv_kernel_dim);
  if (c.num_experts)
    std::printf("moe            %lld experts, top-%lld, expert ffn %lld, shared expert %lld\n", (long long)c.num_experts,
                (long long)c.num_experts_per_tok, (long long)c.moe_intermediate_size,
                (long long)c.shared_expert_intermediate_size);
  std::printf("parameters     %.3f B total, %.3f B active per token\n", fp.total_params / 1e9, fp.active_params / 1e9);
  std::printf("weights        %s in the files (memory-mapped); %s read per decoded token\n",
              human_bytes(double(fp.total_weight_bytes)).c_str(), human_bytes(double(fp.active_weight_bytes)).c_str());
  std::string by_type;
  for (const auto& [type, bytes] : fp.weight_bytes_by_type)
    by_type += (by_type.empty() ? "" : ", ") + type + " " + human_bytes(double(bytes));
  std::printf("weight types   %s\n", by_type.c_str());
  std::printf("kernels        cpu: %s\n", kernel_path_description().c_str());
  std::printf("gdn state      %s per sequence (f32, constant in context; never quantized)\n",
              human_bytes(double(fp.gdn_state_bytes)).c_str());
  std::printf("\nKV cache (full-attention layers only; lives in the session's paged cache in RAM):\n\n");
  std::printf("| type | bytes/token |");
  for (int64_t n : ctxs) std::printf(" KV @ %lld | total @ %lld |", (long long)n, (long long)n);
  std::printf("\n|---|---:|");
  for (size_t i = 0; i < ctxs.size(); ++i) std::printf("---:|---:|");
  std::printf("\n");
  for (DType t : types) {
    if (!kv_type_supported(t, c.head_dim)) continue;
    const uint64_t bpt = kv_bytes_per_token(c, t, t);
    std::printf("| %s | %llu |", dtype_name(t), (unsigned long long)bpt);
    for (int64_t n : ctxs)
      std::printf(" %s | %s |", human_bytes(double(bpt * uint64_t(n))).c_str(),
                  human_bytes(double(bpt * uint64_t(n) + fp.gdn_state_bytes)).c_str());
    std::printf("\n");
  }
  std::printf("\n(total = KV + GDN state per sequence; weights are shared and not included)\n");
  return 0;
}

const CommandRegistrar kRegister("info", "architecture, parameters and cache bytes per context token", run_info);

}  // namespace
}  // namespace weft::cli
