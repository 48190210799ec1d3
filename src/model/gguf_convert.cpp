// HF -> GGUF conversion and GGUF re-quantization (gguf_convert.h).
#include "model/gguf_convert.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "io/gguf_layout.h"
#include "io/gguf_names.h"
#include "io/model_files.h"
#include "io/tokenizer.h"
#include "kernels/cpu/quant_blocks.h"
#include "model/config.h"

namespace weft {

namespace {

struct SchemeName {
  WeightScheme scheme;
  const char* name;
};
constexpr SchemeName kSchemes[] = {
    {WeightScheme::kKeep, "keep"},   {WeightScheme::kF32, "f32"},       {WeightScheme::kF16, "f16"},
    {WeightScheme::kBF16, "bf16"},   {WeightScheme::kQ8_0, "q8_0"},     {WeightScheme::kQ4_0, "q4_0"},
    {WeightScheme::kQ6_K, "q6_k"},   {WeightScheme::kQ4_K_M, "q4_k_m"}, {WeightScheme::kQ5_K_M, "q5_k_m"},
};

bool ends_with(const std::string& s, std::string_view suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between.
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool fits(GgmlType t, int64_t cols) { return cols % ggml_block_size(t) == 0; }

// Matrices llama.cpp's quantizer leaves in their type: expert routers (ffn_gate_inp) and the
// shared expert's gate, a single row (1-D to ggml: ggml_n_dims counts no trailing 1).
bool keeps_source_type(const std::string& name) {
  return ends_with(name, "ffn_gate_inp.weight") || ends_with(name, "ffn_gate_inp_shexp.weight");
}

// llama.cpp's "attn_v-like" tensors (more bits under the K-quant mixes): attn_v and attn_qkv
// (the Gated DeltaNet's fused q|k|v), counted together in file order.
bool attn_v_like(const std::string& name) { return ends_with(name, "attn_v.weight") || ends_with(name, "attn_qkv.weight"); }

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> v(size_t(t.numel()));
  const auto* b = static_cast<const uint8_t*>(t.data);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype) {
      case DType::kF32: std::memcpy(&v[i], b + 4 * i, 4); break;
      case DType::kF16: { uint16_t h; std::memcpy(&h, b + 2 * i, 2); v[i] = f16_to_f32(h); break; }
      case DType::kBF16: { uint16_t h; std::memcpy(&h, b + 2 * i, 2); v[i] = bf16_to_f32(h); break; }
      default: break;  // checked by the caller
    }
  }
  return v;
}

struct OutTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
  std::vector<uint8_t> data;
};

// Encodes f32 values [rows, ne[0]] into `type`. Rows are independent (quantize_row reads one row
// and writes its blocks), so a large tensor's rows are spread over the machine's cores in tasks of
// a fixed number of rows: the same bytes for any core count. (On one core, `synth --format gguf
// --type q5_k_m` of 40 layers x 16 experts did not finish in 230 s; docs/results.md §10.)
OutTensor encode(std::string name, GgmlType type, std::vector<int64_t> ne, const std::vector<float>& v, int threads) {
  OutTensor o{std::move(name), type, std::move(ne), {}};
  const int64_t cols = o.ne[0], rows = cols == 0 ? 0 : int64_t(v.size()) / cols;
  const size_t rb = ggml_row_bytes(type, cols);
  o.data.resize(rb * size_t(rows));
  const int64_t rows_per_task = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, cols));
  const int64_t tasks = ceil_div(rows, rows_per_task);
  const auto run = [&](int64_t task) {
    const int64_t r1 = std::min(rows, (task + 1) * rows_per_task);
    for (int64_t r = task * rows_per_task; r < r1; ++r)
      quantize_row(type, v.data() + r * cols, o.data.data() + size_t(r) * rb, cols);
  };
  const int64_t cores = threads > 0 ? threads : int64_t(std::thread::hardware_concurrency());
  if (tasks < 2 || cores < 2) {
    for (int64_t t = 0; t < tasks; ++t) run(t);
  } else {
    ThreadPool pool(int(std::min(cores, tasks)));
    pool.parallel_for(tasks, run);
  }
  return o;
}

std::vector<float> gather_f32(const std::vector<float>& v, int64_t row_len, const std::vector<int64_t>& map) {
  std::vector<float> out(v.size());
  gather_rows(v.data(), size_t(row_len) * 4, map, out.data());
  return out;
}

const char* gguf_arch_of(const std::string& model_type) {
  if (model_type == "llama") return "llama";
  if (model_type == "qwen3") return "qwen3";
  if (model_type == "qwen3_next") return "qwen3next";
  if (model_type == "qwen3_5_text") return "qwen35";
  if (model_type == "qwen3_5_moe_text") return "qwen35moe";
  return nullptr;
}

using Metadata = std::vector<std::pair<std::string, GgufValue>>;

void put_hparams(const ModelConfig& c, const std::string& arch, const nlohmann::json& hf_config, Metadata* m) {
  auto u32 = [&](const char* k, int64_t v) { m->emplace_back(gguf_key(arch, k), GgufValue::u32(uint32_t(v))); };
  auto f32 = [&](const char* k, double v) { m->emplace_back(gguf_key(arch, k), GgufValue::f32(float(v))); };
  u32("context_length", c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096);
  u32("embedding_length", c.hidden_size);
  u32("block_count", c.num_hidden_layers);
  u32("feed_forward_length", c.intermediate_size);
  u32("attention.head_count", c.num_attention_heads);
  u32("attention.head_count_kv", c.num_key_value_heads);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  f32("attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  f32("rope.freq_base", c.rope_theta);
  u32("rope.dimension_count", c.rotary_dim);
  if (arch == "qwen35" || arch == "qwen35moe") {
    // Interleaved M-RoPE sections; with text-only positions every section sees the same position.
    std::vector<int32_t> sec = {11, 11, 10, 0};
    const nlohmann::json& t = hf_config.contains("text_config") ? hf_config["text_config"] : hf_config;
    for (const char* key : {"rope_parameters", "rope_scaling"})
      if (t.contains(key) && t[key].is_object() && t[key].contains("mrope_section") && t[key]["mrope_section"].is_array()) {
        sec.assign(4, 0);
        for (size_t i = 0; i < t[key]["mrope_section"].size() && i < 4; ++i) sec[i] = t[key]["mrope_section"][i].get<int32_t>();
      }
    m->emplace_back(gguf_key(arch, "rope.dimension_sections"), GgufValue::i32_array(sec));
  }
  if (c.num_experts > 0) {
    u32("expert_count", c.num_experts);
    u32("expert_used_count", c.num_experts_per_tok);
    u32("expert_feed_forward_length", c.moe_intermediate_size);
    if (c.shared_expert_intermediate_size > 0) u32("expert_shared_feed_forward_length", c.shared_expert_intermediate_size);
    m->emplace_back(gguf_key(arch, "expert_weights_norm"), GgufValue::boolean(c.norm_topk_prob));
  }
  if (c.num_linear_attention_layers() > 0) {
    u32("ssm.conv_kernel", c.linear_conv_kernel_dim);
    u32("ssm.state_size", c.linear_key_head_dim);
    u32("ssm.group_count", c.linear_num_key_heads);
    u32("ssm.time_step_rank", c.linear_num_value_heads);
    u32("ssm.inner_size", c.gdn_value_dim());
    int64_t interval = c.num_hidden_layers;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      if (c.layer_kinds[size_t(i)] == LayerKind::kFullAttention) { interval = i + 1; break; }
    u32("full_attention_interval", interval);
  }
}

// GPT-2's byte-to-character map (the ByteLevel alphabet), as UTF-8: byte b's token text.
std::string byte_level_char(int b) {
  auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += !printable(x);
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// A checkpoint without tokenizer.json (synthetic models, test fixtures) still needs a vocabulary
// for llama.cpp to load the file: a byte-level placeholder of vocab_size tokens (the 256 bytes,
// then "<extra_i>"), no merges, eos the last id. Token ids are what benchmarks and tests feed.
void put_placeholder_tokenizer(int64_t vocab_size, Metadata* m) {
  std::vector<std::string> tokens;
  tokens.reserve(size_t(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i)
    tokens.push_back(i < 256 ? byte_level_char(int(i)) : "<extra_" + std::to_string(i) + ">");
  m->emplace_back("tokenizer.ggml.model", GgufValue::string("gpt2"));
  m->emplace_back("tokenizer.ggml.pre", GgufValue::string("gpt-2"));
  m->emplace_back("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
  m->emplace_back("tokenizer.ggml.token_type", GgufValue::i32_array(std::vector<int32_t>(size_t(vocab_size), 1)));
  m->emplace_back("tokenizer.ggml.merges", GgufValue::string_array({}));
  m->emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(uint32_t(vocab_size - 1)));
}

// tokenizer.json (+ tokenizer_config.json) as tokenizer.ggml.* metadata: a "gpt2" BPE model.
Status put_tokenizer(const std::string& dir, int64_t vocab_size, Metadata* m) {
  const std::string path = dir + "/tokenizer.json";
  if (!std::filesystem::exists(path)) {
    put_placeholder_tokenizer(vocab_size, m);
    return Status();
  }
  auto tok = Tokenizer::load(path);
  if (!tok.ok()) return tok.status();
  auto text = read_text_file(path);
  if (!text.ok()) return text.status();
  const nlohmann::json tj = nlohmann::json::parse(text.value(), nullptr, false);
  if (tj.is_discarded() || !tj.contains("model")) return Status::error("'" + path + "' is not a tokenizer");
  const nlohmann::json& model = tj["model"];
  int64_t n = vocab_size;
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  auto grow = [&](int64_t id) {
    if (id >= n) n = id + 1;
    while (int64_t(tokens.size()) < n) {
      tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]");
      types.push_back(5);  // unused
    }
  };
  grow(0);
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    const int64_t id = it->get<int64_t>();
    grow(id);
    tokens[size_t(id)] = it.key();
    types[size_t(id)] = 1;  // normal
  }
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array())
    for (const auto& a : tj["added_tokens"]) {
      const int64_t id = a["id"].get<int64_t>();
      grow(id);
      tokens[size_t(id)] = a["content"].get<std::string>();
      types[size_t(id)] = a.value("special", false) ? 3 : 4;  // control : user-defined
    }
  std::vector<std::string> merges;
  for (const auto& mg : model["merges"]) {
    if (mg.is_string()) merges.push_back(mg.get<std::string>());
    else if (mg.is_array() && mg.size() == 2) merges.push_back(mg[0].get<std::string>() + " " + mg[1].get<std::string>());
  }
  const char* pre = tok->split_pattern() == SplitPattern::kQwen2 ? "qwen2"
                    : tok->split_pattern() == SplitPattern::kLlama3 ? "llama-bpe" : "gpt-2";
  m->emplace_back("tokenizer.ggml.model", GgufValue::string("gpt2"));
  m->emplace_back("tokenizer.ggml.pre", GgufValue::string(pre));
  m->emplace_back("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
  m->emplace_back("tokenizer.ggml.token_type", GgufValue::i32_array(types));
  m->emplace_back("tokenizer.ggml.merges", GgufValue::string_array(merges));
  if (tok->bos_id()) m->emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(uint32_t(*tok->bos_id())));
  const std::vector<int32_t> eos = tok->eos_ids();
  if (!eos.empty()) m->emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(uint32_t(eos[0])));
  if (eos.size() > 1) m->emplace_back("tokenizer.ggml.eot_token_id", GgufValue::u32(uint32_t(eos[1])));
  m->emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(tok->add_bos()));
  if (std::filesystem::exists(dir + "/tokenizer_config.json")) {
    auto cfg_text = read_text_file(dir + "/tokenizer_config.json");
    if (cfg_text.ok()) {
      const nlohmann::json cfg = nlohmann::json::parse(cfg_text.value(), nullptr, false);
      if (!cfg.is_discarded() && cfg.contains("chat_template") && cfg["chat_template"].is_string())
        m->emplace_back("tokenizer.chat_template", GgufValue::string(cfg["chat_template"].get<std::string>()));
    }
  }
  return Status();
}

GgmlType ggml_of(DType d) { return *ggml_type_from_dtype(d); }

}  // namespace

Result<WeightScheme> parse_weight_scheme(const std::string& name) {
  std::string lower;
  for (char ch : name) lower += char(std::tolower(static_cast<unsigned char>(ch)));
  std::string all;
  for (const auto& s : kSchemes) {
    if (lower == s.name) return s.scheme;
    all += std::string(all.empty() ? "" : ", ") + s.name;
  }
  return Status::error("unknown weight type '" + name + "' (accepted: " + all + ")");
}

const char* weight_scheme_name(WeightScheme s) {
  for (const auto& x : kSchemes)
    if (x.scheme == s) return x.name;
  return "?";
}

GgmlType weight_type_for(WeightScheme scheme, const TensorRole& role, GgmlType source, int64_t cols) {
  const std::string& n = role.gguf_name;
  const bool output = n == "output.weight" || (role.tied_output && n == "token_embd.weight");
  GgmlType t = source;
  switch (scheme) {
    case WeightScheme::kKeep: return source;
    case WeightScheme::kF32: return GgmlType::kF32;
    case WeightScheme::kF16: return GgmlType::kF16;
    case WeightScheme::kBF16: return GgmlType::kBF16;
    case WeightScheme::kQ8_0: t = GgmlType::kQ8_0; break;
    case WeightScheme::kQ6_K: t = GgmlType::kQ6_K; break;
    case WeightScheme::kQ4_0: t = GgmlType::kQ4_0; break;
    case WeightScheme::kQ4_K_M: t = GgmlType::kQ4_K; break;
    case WeightScheme::kQ5_K_M: t = GgmlType::kQ5_K; break;
  }
  if (keeps_source_type(n)) return source;
  // llama_tensor_get_type_impl, for the schemes and types weft has:
  const bool k_mix = scheme == WeightScheme::kQ4_K_M || scheme == WeightScheme::kQ5_K_M;
  if (output) {
    // The output head (or the tied embedding): q8_0 when the default type's block does not
    // divide a row, else q6_K unless the default is q8_0.
    t = !fits(t, cols) ? GgmlType::kQ8_0 : t != GgmlType::kQ8_0 ? GgmlType::kQ6_K : t;
  } else if (attn_v_like(n)) {
    if (k_mix && use_more_bits(role.i_attn_v, role.n_attn_v)) t = GgmlType::kQ6_K;
    if (role.n_experts == 8) t = GgmlType::kQ8_0;
  } else if (ends_with(n, "attn_k.weight")) {
    if (role.n_experts == 8) t = GgmlType::kQ8_0;
  } else if (n.find("ffn_down") != std::string::npos) {
    if (k_mix && use_more_bits(role.layer, role.n_layers)) t = GgmlType::kQ6_K;
  } else if (ends_with(n, "attn_output.weight")) {
    if (role.n_experts == 8 && scheme == WeightScheme::kQ4_K_M) t = GgmlType::kQ5_K;
  }
  // A row that is not whole blocks: llama.cpp falls back to q5_0 (from q4_K), q5_1 (from q5_K) or
  // q8_0 (from q6_K), weft (which has no q5_0 / q5_1) to q8_0; then both to f16.
  if (!fits(t, cols)) t = GgmlType::kQ8_0;
  if (!fits(t, cols)) t = GgmlType::kF16;
  return t;
}

namespace {
// Bytes of the tensors a conversion reads: the text model's (under `prefix`) and lm_head.
int64_t text_model_bytes(const ModelFiles& files, const std::string& prefix) {
  int64_t total = 0;
  for (const auto& [name, t] : files.tensors())
    if (name.rfind(prefix, 0) == 0 || name == "lm_head.weight") total += int64_t(t.nbytes);
  return total;
}
}  // namespace

Status convert_hf_to_gguf(const std::string& hf_dir, const std::string& out_path, WeightScheme scheme,
                          const ConvertProgress& progress, int threads) {
  auto files_r = ModelFiles::open(hf_dir);
  if (!files_r.ok()) return files_r.status();
  const ModelFiles& files = *files_r.value();
  auto cfg = parse_model_config(files.config(), files.generation_config());
  if (!cfg.ok()) return cfg.status().with_context(hf_dir);
  const ModelConfig& c = cfg.value();
  const char* arch_c = gguf_arch_of(c.model_type);
  if (!arch_c) return Status::error("model_type '" + c.model_type + "' has no GGUF architecture in weft (llama, qwen3, qwen3next, qwen35, qwen35moe)");
  const std::string arch = arch_c;
  if (c.rope_llama3_factor != 0) return Status::error("Llama-3 RoPE scaling (rope_freqs) is not written yet");
  const bool hybrid = gguf_arch_info(arch)->hybrid_gdn;
  const std::string& pre = c.tensor_prefix;
  const int64_t H = c.hidden_size;

  Metadata meta;
  meta.emplace_back("general.architecture", GgufValue::string(arch));
  meta.emplace_back("general.name", GgufValue::string(std::filesystem::path(hf_dir).filename().string()));
  meta.emplace_back("general.alignment", GgufValue::u32(kGgufDefaultAlignment));
  put_hparams(c, arch, files.config(), &meta);
  WEFT_RETURN_IF_ERROR(put_tokenizer(hf_dir, c.vocab_size, &meta).with_context("tokenizer"));

  std::vector<OutTensor> out;
  TensorRole role;
  role.n_layers = c.num_hidden_layers;
  role.n_attn_v = c.num_hidden_layers;  // one attn_v (attention) or attn_qkv (Gated DeltaNet) per layer
  role.n_experts = c.num_experts;
  role.tied_output = !files.find("lm_head.weight") && c.tie_word_embeddings;

  // Progress is counted in source bytes converted: the output tensors' count is only known once
  // they are all made, and tensors differ in size by orders of magnitude (an expert stack against
  // a norm). The total is the text model's tensors (the prefix's, lm_head), not a vision tower's
  // or a multi-token-prediction head's, which conversion does not read. A tensor counts once it
  // is encoded (numel x its source dtype's size), so quantizing a large stack shows as it ends.
  const int64_t total_bytes = text_model_bytes(files, pre);
  int64_t done_bytes = 0;
  auto advance = [&](const std::string& gname, int64_t source_bytes) {
    done_bytes += source_bytes;
    if (progress) progress(gname, std::min(done_bytes, total_bytes), total_bytes);
  };
  auto src = [&](const std::string& name) -> Result<const TensorView*> {
    const TensorView* t = files.find(name);
    if (!t) return Status::error("missing tensor '" + name + "'");
    if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16)
      return Status::error("tensor '" + name + "' has dtype " + dtype_name(t->dtype) + "; weft converts f32, f16 and bf16");
    return t;
  };
  // A weight matrix [rows, cols] (or stacked experts [E, rows, cols]) from f32 values.
  auto matrix = [&](const std::string& gname, DType source, std::vector<int64_t> ne, const std::vector<float>& v) {
    role.gguf_name = gname;
    const GgmlType t = weight_type_for(scheme, role, ggml_of(source), ne[0]);
    if (attn_v_like(gname)) ++role.i_attn_v;
    out.push_back(encode(gname, t, std::move(ne), v, threads));
    advance(gname, int64_t(v.size()) * int64_t(dtype_size(source)));
  };
  auto vec = [&](const std::string& gname, std::vector<int64_t> ne, std::vector<float> v, bool plus_one) {
    if (plus_one)
      for (float& x : v) x = 1.0f + x;
    out.push_back(encode(gname, GgmlType::kF32, std::move(ne), v, threads));
    advance(gname, 0);  // norms, biases, conv taps: too small to count
  };
  // Plain copies of a 2-D HF matrix, rows optionally gathered.
  auto copy2d = [&](const std::string& hf, const std::string& gname, const std::vector<int64_t>& map = {}) -> Status {
    auto t = src(hf);
    if (!t.ok()) return t.status();
    const TensorView& tv = *t.value();
    if (tv.rank() != 2) return Status::error("tensor '" + hf + "' is not 2-D");
    std::vector<float> v = to_f32(tv);
    if (!map.empty()) v = gather_f32(v, tv.dim(1), map);
    matrix(gname, tv.dtype, {tv.dim(1), tv.dim(0)}, v);
    return Status();
  };
  auto norm = [&](const std::string& hf, const std::string& gname, bool plus_one) -> Status {
    auto t = src(hf);
    if (!t.ok()) return t.status();
    vec(gname, {t.value()->numel()}, to_f32(*t.value()), plus_one);
    return Status();
  };

  auto run = [&]() -> Status {
    WEFT_RETURN_IF_ERROR(copy2d(pre + "embed_tokens.weight", "token_embd.weight"));
    WEFT_RETURN_IF_ERROR(norm(pre + "norm.weight", "output_norm.weight", hybrid));
    if (files.find("lm_head.weight") && !c.tie_word_embeddings) WEFT_RETURN_IF_ERROR(copy2d("lm_head.weight", "output.weight"));
    const int64_t nk = c.linear_num_key_heads, nv = c.linear_num_value_heads, dk = c.linear_key_head_dim,
                  dv = c.linear_value_head_dim;
    const bool v_tiled = (arch == "qwen35" || arch == "qwen35moe") && nk > 0 && nk != nv;
    const std::vector<int64_t> vmap = v_tiled ? vhead_tiled_map(nk, nv) : std::vector<int64_t>();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      role.layer = l;
      const std::string p = pre + "layers." + std::to_string(l) + ".", g = "blk." + std::to_string(l) + ".";
      WEFT_RETURN_IF_ERROR(norm(p + "input_layernorm.weight", g + "attn_norm.weight", hybrid));
      WEFT_RETURN_IF_ERROR(norm(p + "post_attention_layernorm.weight", g + gguf_arch_info(arch)->post_attn_norm + ".weight", hybrid));
      if (c.layer_kinds[size_t(l)] == LayerKind::kFullAttention) {
        const std::string a = p + "self_attn.";
        const bool llama = arch == "llama";
        const auto qmap = llama ? llama_rope_row_map(c.num_attention_heads, c.head_dim) : std::vector<int64_t>();
        const auto kmap = llama ? llama_rope_row_map(c.num_key_value_heads, c.head_dim) : std::vector<int64_t>();
        WEFT_RETURN_IF_ERROR(copy2d(a + "q_proj.weight", g + "attn_q.weight", qmap));
        WEFT_RETURN_IF_ERROR(copy2d(a + "k_proj.weight", g + "attn_k.weight", kmap));
        WEFT_RETURN_IF_ERROR(copy2d(a + "v_proj.weight", g + "attn_v.weight"));
        WEFT_RETURN_IF_ERROR(copy2d(a + "o_proj.weight", g + "attn_output.weight"));
        if (c.attention_bias) {
          for (auto [hf, gn, map] : {std::tuple{"q_proj.bias", "attn_q.bias", &qmap}, {"k_proj.bias", "attn_k.bias", &kmap},
                                     {"v_proj.bias", "attn_v.bias", static_cast<const std::vector<int64_t>*>(nullptr)}}) {
            auto t = src(a + hf);
            if (!t.ok()) return t.status();
            std::vector<float> v = to_f32(*t.value());
            if (map && !map->empty()) v = gather_f32(v, 1, *map);
            vec(g + gn, {int64_t(v.size())}, v, false);
          }
        }
        if (c.qk_norm) {
          WEFT_RETURN_IF_ERROR(norm(a + "q_norm.weight", g + "attn_q_norm.weight", hybrid));
          WEFT_RETURN_IF_ERROR(norm(a + "k_norm.weight", g + "attn_k_norm.weight", hybrid));
        }
      } else {
        const std::string a = p + "linear_attn.";
        const int64_t key_dim = nk * dk;
        if (c.gdn_packed_qkvz) {
          auto t = src(a + "in_proj_qkvz.weight");
          if (!t.ok()) return t.status();
          std::vector<float> v = gather_f32(to_f32(*t.value()), H, qwen3next_qkvz_row_map(nk, dk, nv, dv));
          const int64_t qkv_rows = 2 * key_dim + nv * dv;
          matrix(g + "attn_qkv.weight", t.value()->dtype, {H, qkv_rows}, std::vector<float>(v.begin(), v.begin() + qkv_rows * H));
          matrix(g + "attn_gate.weight", t.value()->dtype, {H, nv * dv}, std::vector<float>(v.begin() + qkv_rows * H, v.end()));
          WEFT_RETURN_IF_ERROR(copy2d(a + "in_proj_ba.weight", g + "ssm_ba.weight"));
        } else {
          WEFT_RETURN_IF_ERROR(copy2d(a + "in_proj_qkv.weight", g + "attn_qkv.weight", v_tiled ? expand_head_map(vmap, dv, 2 * key_dim) : std::vector<int64_t>()));
          WEFT_RETURN_IF_ERROR(copy2d(a + "in_proj_z.weight", g + "attn_gate.weight", v_tiled ? expand_head_map(vmap, dv) : std::vector<int64_t>()));
          WEFT_RETURN_IF_ERROR(copy2d(a + "in_proj_b.weight", g + "ssm_beta.weight", vmap));
          WEFT_RETURN_IF_ERROR(copy2d(a + "in_proj_a.weight", g + "ssm_alpha.weight", vmap));
        }
        {  // conv1d [C, 1, K] -> ne {K, C}
          auto t = src(a + "conv1d.weight");
          if (!t.ok()) return t.status();
          const int64_t C = t.value()->dim(0), K = t.value()->dim(-1);
          std::vector<float> v = to_f32(*t.value());
          if (v_tiled) v = gather_f32(v, K, expand_head_map(vmap, dv, 2 * key_dim));
          vec(g + "ssm_conv1d.weight", {K, C}, v, false);
        }
        {  // ssm_a = -exp(A_log), computed as the GDN gate computes it (float exp)
          auto t = src(a + "A_log");
          if (!t.ok()) return t.status();
          std::vector<float> v = to_f32(*t.value());
          for (float& x : v) x = -std::exp(x);
          if (v_tiled) v = gather_f32(v, 1, vmap);
          vec(g + "ssm_a", {nv}, v, false);
          auto d = src(a + "dt_bias");
          if (!d.ok()) return d.status();
          std::vector<float> dt = to_f32(*d.value());
          if (v_tiled) dt = gather_f32(dt, 1, vmap);
          vec(g + "ssm_dt.bias", {nv}, dt, false);
        }
        WEFT_RETURN_IF_ERROR(norm(a + "norm.weight", g + "ssm_norm.weight", false));
        {  // out_proj [H, nv*dv]: columns in value-head chunks
          auto t = src(a + "out_proj.weight");
          if (!t.ok()) return t.status();
          std::vector<float> v = to_f32(*t.value());
          if (v_tiled) {
            std::vector<float> o(v.size());
            permute_col_chunks(DType::kF32, v.data(), H, nv * dv, dv, vmap, /*scatter=*/false, o.data());
            v.swap(o);
          }
          matrix(g + "ssm_out.weight", t.value()->dtype, {nv * dv, H}, v);
        }
      }
      const std::string m = p + "mlp.";
      if (c.ffn_kinds[size_t(l)] == FfnKind::kDense) {
        WEFT_RETURN_IF_ERROR(copy2d(m + "gate_proj.weight", g + "ffn_gate.weight"));
        WEFT_RETURN_IF_ERROR(copy2d(m + "up_proj.weight", g + "ffn_up.weight"));
        WEFT_RETURN_IF_ERROR(copy2d(m + "down_proj.weight", g + "ffn_down.weight"));
      } else {
        const int64_t E = c.num_experts, I = c.moe_intermediate_size;
        WEFT_RETURN_IF_ERROR(copy2d(m + "gate.weight", g + "ffn_gate_inp.weight"));
        std::vector<float> gate, up, down;
        DType sd = DType::kBF16;
        if (files.find(m + "experts.gate_up_proj")) {
          auto gu = src(m + "experts.gate_up_proj");
          if (!gu.ok()) return gu.status();
          auto dn = src(m + "experts.down_proj");
          if (!dn.ok()) return dn.status();
          sd = gu.value()->dtype;
          const std::vector<float> v = to_f32(*gu.value());
          for (int64_t e = 0; e < E; ++e) {
            const float* base = v.data() + e * 2 * I * H;
            gate.insert(gate.end(), base, base + I * H);
            up.insert(up.end(), base + I * H, base + 2 * I * H);
          }
          down = to_f32(*dn.value());
        } else {
          for (int64_t e = 0; e < E; ++e) {
            const std::string x = m + "experts." + std::to_string(e) + ".";
            for (auto [name, dst] : {std::pair{"gate_proj", &gate}, {"up_proj", &up}, {"down_proj", &down}}) {
              auto t = src(x + name + ".weight");
              if (!t.ok()) return t.status();
              sd = t.value()->dtype;
              const std::vector<float> v = to_f32(*t.value());
              dst->insert(dst->end(), v.begin(), v.end());
            }
          }
        }
        if (int64_t(gate.size()) != E * I * H || int64_t(up.size()) != E * I * H || int64_t(down.size()) != E * I * H)
          return Status::error("layer " + std::to_string(l) + ": expert tensors do not match num_experts x moe_intermediate_size");
        matrix(g + "ffn_gate_exps.weight", sd, {H, I, E}, gate);
        matrix(g + "ffn_up_exps.weight", sd, {H, I, E}, up);
        matrix(g + "ffn_down_exps.weight", sd, {I, H, E}, down);
        if (files.find(m + "shared_expert.gate_proj.weight")) {
          WEFT_RETURN_IF_ERROR(copy2d(m + "shared_expert.gate_proj.weight", g + "ffn_gate_shexp.weight"));
          WEFT_RETURN_IF_ERROR(copy2d(m + "shared_expert.up_proj.weight", g + "ffn_up_shexp.weight"));
          WEFT_RETURN_IF_ERROR(copy2d(m + "shared_expert.down_proj.weight", g + "ffn_down_shexp.weight"));
          WEFT_RETURN_IF_ERROR(copy2d(m + "shared_expert_gate.weight", g + "ffn_gate_inp_shexp.weight"));
        }
      }
    }
    return Status();
  };
  WEFT_RETURN_IF_ERROR(run().with_context(hf_dir));
  if (progress) progress("writing " + out_path, total_bytes, total_bytes);  // done == total: always shown
  std::vector<GgufTensorToWrite> w;
  for (const OutTensor& t : out) w.push_back({t.name, t.type, t.ne, t.data.data()});
  return write_gguf(out_path, meta, w);
}

Status quantize_gguf(const std::string& in_path, const std::string& out_path, WeightScheme scheme,
                     const ConvertProgress& progress, int threads) {
  auto f_r = GgufFile::open(in_path);
  if (!f_r.ok()) return f_r.status();
  const GgufFile& f = f_r.value();
  TensorRole role;
  int64_t blocks = 0;
  std::string arch;
  if (auto a = f.get_string("general.architecture"); a.ok()) arch = a.value();
  if (auto b = f.get_uint(gguf_key(arch, "block_count")); b.ok()) blocks = int64_t(b.value());
  if (auto b = f.get_uint(gguf_key(arch, "expert_count")); b.ok()) role.n_experts = int64_t(b.value());
  role.n_layers = blocks;  // llama.cpp's n_layer_all (MTP blocks included)
  role.tied_output = f.find_tensor("output.weight") == nullptr;
  for (const GgufTensor& t : f.tensors()) role.n_attn_v += attn_v_like(t.name);

  std::vector<OutTensor> out;
  out.reserve(f.tensors().size());
  std::vector<GgufTensorToWrite> w;
  for (const GgufTensor& t : f.tensors()) {
    const bool weight = t.ne.size() >= 2 && ends_with(t.name, ".weight") && !ends_with(t.name, "ssm_conv1d.weight");
    if (!weight || !ggml_type_to_dtype(t.type)) {
      w.push_back({t.name, t.type, t.ne, t.data});
      continue;
    }
    role.gguf_name = t.name;
    role.layer = -1;
    if (t.name.rfind("blk.", 0) == 0) {
      role.layer = 0;
      for (size_t i = 4; i < t.name.size() && i < 10 && std::isdigit(static_cast<unsigned char>(t.name[i])); ++i)
        role.layer = role.layer * 10 + (t.name[i] - '0');
    }
    const bool source_plain = t.type == GgmlType::kF32 || t.type == GgmlType::kF16 || t.type == GgmlType::kBF16;
    const GgmlType type = weight_type_for(scheme, role, source_plain ? t.type : GgmlType::kF16, t.cols());
    if (attn_v_like(t.name)) ++role.i_attn_v;
    if (type == t.type) {
      w.push_back({t.name, t.type, t.ne, t.data});
      continue;
    }
    std::vector<float> v(size_t(t.numel()));
    for (int64_t r = 0; r < t.rows(); ++r) dequantize_row(t.type, t.data + size_t(r) * t.row_bytes(), v.data() + r * t.cols(), t.cols());
    out.push_back(encode(t.name, type, t.ne, v, threads));  // reserved: earlier data pointers stay valid
    w.push_back({t.name, type, t.ne, out.back().data.data()});
    if (progress) progress(t.name, int64_t(w.size()), int64_t(f.tensors().size()));
  }
  return write_gguf(out_path, f.metadata(), w);
}

}  // namespace weft
