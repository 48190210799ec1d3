// ModelFiles::open_gguf: a GGUF model seen as a Hugging Face directory. The hyper-parameters
// become a config.json object (parsed by the one config parser), and each GGUF tensor becomes the
// HF tensor it was converted from (gguf_names.h), with llama.cpp's converter reorders undone
// (gguf_layout.h): Llama's Q/K RoPE permutation, Qwen3.5's tiled GDN value heads, Qwen3-Next's
// regrouped in_proj_qkvz, ssm_a = -exp(A_log), the squeezed conv1d and the stacked experts
// (exposed as per-expert views). Untouched tensors stay views into the mapped file; reordered
// ones are copied once into owned memory. The norms' folded +1 stays (norms_plus_one_folded).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/quant_types.h"
#include "io/gguf_layout.h"
#include "io/gguf_names.h"
#include "io/model_files.h"
#include "kernels/cpu/quant_blocks.h"

namespace weft {

namespace {

const char* hf_model_type(std::string_view arch) {
  if (arch == "llama") return "llama";
  if (arch == "qwen3") return "qwen3";
  if (arch == "qwen3next") return "qwen3_next";
  if (arch == "qwen35") return "qwen3_5_text";
  if (arch == "qwen35moe") return "qwen3_5_moe_text";
  return nullptr;
}

// A numeric metadata value; arrays (per-layer values) give their first non-zero element.
std::optional<double> meta_number(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufType::kArray) {
    for (const GgufValue& e : v->items) {
      double x = e.is_unsigned() ? double(e.u) : e.is_signed() ? double(e.i) : e.f;
      if (e.type != GgufType::kString && e.type != GgufType::kArray && x != 0) return x;
    }
    return std::nullopt;
  }
  if (v->is_unsigned() || v->type == GgufType::kBool) return double(v->u);
  if (v->is_signed()) return double(v->i);
  if (v->type == GgufType::kF32 || v->type == GgufType::kF64) return v->f;
  return std::nullopt;
}

// The tensor's HF view (type, HF row-major shape), pointing into the mapped file.
Result<TensorView> view_of(const GgufTensor& t) {
  std::optional<DType> dt = ggml_type_to_dtype(t.type);
  if (!dt) return Status::error(std::string("tensor '") + t.name + "' has type " + ggml_type_name(t.type) + ", not a weight type");
  TensorView v;
  v.dtype = *dt;
  v.shape = t.shape();
  v.data = t.data;
  v.nbytes = t.nbytes;
  return v;
}

}  // namespace

bool ModelFiles::is_gguf(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace weft

namespace weft {

Result<std::unique_ptr<ModelFiles>> ModelFiles::open_gguf(const std::string& path) {
  auto opened = GgufFile::open(path);
  if (!opened.ok()) return opened.status();
  auto files = std::make_unique<ModelFiles>();
  files->dir_ = path;
  files->gguf_ = std::make_unique<GgufFile>(std::move(opened.value()));
  const GgufFile& f = *files->gguf_;
  auto fail = [&](const std::string& m) { return Status::error("'" + path + "': " + m); };

  auto arch_r = f.get_string("general.architecture");
  if (!arch_r.ok()) return fail(arch_r.status().message());
  const std::string arch = arch_r.value();
  const GgufArchInfo* info = gguf_arch_info(arch);
  if (!info || !hf_model_type(arch))
    return fail("architecture '" + arch + "' is not supported; weft runs llama, qwen3, qwen3next, qwen35 and qwen35moe");
  auto num = [&](const char* suffix) { return meta_number(f, gguf_key(arch, suffix)); };
  // Every size is bounded before it drives a loop or an allocation (hostile metadata).
  auto need = [&](const char* suffix, int64_t* out, int64_t max = int64_t(1) << 20) -> Status {
    std::optional<double> v = num(suffix);
    if (!v || !(*v >= 1 && *v <= double(max)) || *v != std::floor(*v))
      return fail("metadata '" + gguf_key(arch, suffix) + "' is missing or not an integer in [1, " + std::to_string(max) + "]");
    *out = int64_t(*v);
    return Status();
  };
  auto opt_num = [&](const char* suffix, int64_t fallback, int64_t* out) -> Status {
    if (!num(suffix)) {
      *out = fallback;
      return Status();
    }
    return need(suffix, out);
  };

  // ---- Hyper-parameters -> config.json ----
  nlohmann::json c;
  c["model_type"] = hf_model_type(arch);
  int64_t blocks = 0, hidden = 0, heads = 0;
  WEFT_RETURN_IF_ERROR(need("block_count", &blocks, 4096));
  WEFT_RETURN_IF_ERROR(need("embedding_length", &hidden));
  WEFT_RETURN_IF_ERROR(need("attention.head_count", &heads, 4096));
  const double nextn_v = num("nextn_predict_layers").value_or(0);
  if (!(nextn_v >= 0 && nextn_v < double(blocks)) || nextn_v != std::floor(nextn_v))
    return fail("nextn_predict_layers leaves no decoder layer");
  const int64_t n_layer = blocks - int64_t(nextn_v);
  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (!embd || embd->ne.size() != 2) return fail("missing 2-D tensor 'token_embd.weight'");
  c["vocab_size"] = embd->ne[1];
  c["hidden_size"] = hidden;
  c["num_hidden_layers"] = n_layer;
  c["num_attention_heads"] = heads;
  int64_t kv_heads = 0, head_dim = 0;
  WEFT_RETURN_IF_ERROR(opt_num("attention.head_count_kv", heads, &kv_heads));
  WEFT_RETURN_IF_ERROR(opt_num("attention.key_length", std::max<int64_t>(1, hidden / heads), &head_dim));
  c["num_key_value_heads"] = kv_heads;
  c["head_dim"] = head_dim;
  if (auto v = num("attention.layer_norm_rms_epsilon")) c["rms_norm_eps"] = *v;
  if (auto v = num("context_length")) c["max_position_embeddings"] = int64_t(*v);
  nlohmann::json rope = {{"rope_type", "default"}, {"rope_theta", num("rope.freq_base").value_or(10000.0)}};
  if (auto v = num("rope.dimension_count")) rope["partial_rotary_factor"] = *v / double(head_dim);
  c["rope_parameters"] = rope;
  if (f.find_tensor("rope_freqs.weight"))
    return fail("RoPE frequency factors (rope_freqs.weight, Llama-3 scaling) are not supported yet");
  if (auto v = num("feed_forward_length"); v && *v > 0) c["intermediate_size"] = int64_t(*v);
  if (info->moe) {
    int64_t e = 0, k = 0, i = 0;
    WEFT_RETURN_IF_ERROR(need("expert_count", &e));
    WEFT_RETURN_IF_ERROR(need("expert_used_count", &k));
    WEFT_RETURN_IF_ERROR(need("expert_feed_forward_length", &i));
    c["num_experts"] = e;
    c["num_experts_per_tok"] = k;
    c["moe_intermediate_size"] = i;
    if (auto v = num("expert_shared_feed_forward_length")) c["shared_expert_intermediate_size"] = int64_t(*v);
    if (const GgufValue* v = f.find(gguf_key(arch, "expert_weights_norm")); v && v->type == GgufType::kBool)
      c["norm_topk_prob"] = v->u != 0;
    nlohmann::json mlp_only = nlohmann::json::array();
    for (int64_t l = 0; l < n_layer; ++l)
      if (!f.find_tensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight")) mlp_only.push_back(l);
    c["mlp_only_layers"] = mlp_only;
  }
  int64_t nk = 0, nv = 0, dk = 0, dv = 0;
  if (info->hybrid_gdn) {
    nlohmann::json types = nlohmann::json::array();
    bool any_linear = false;
    for (int64_t l = 0; l < n_layer; ++l) {
      const bool full = f.find_tensor("blk." + std::to_string(l) + ".attn_q.weight") != nullptr;
      any_linear |= !full;
      types.push_back(full ? "full_attention" : "linear_attention");
    }
    c["layer_types"] = types;
    if (any_linear) {
      int64_t inner = 0, conv = 0;
      WEFT_RETURN_IF_ERROR(need("ssm.group_count", &nk, 4096));
      WEFT_RETURN_IF_ERROR(need("ssm.time_step_rank", &nv, 4096));
      WEFT_RETURN_IF_ERROR(need("ssm.state_size", &dk, 4096));
      WEFT_RETURN_IF_ERROR(need("ssm.inner_size", &inner, int64_t(1) << 24));
      WEFT_RETURN_IF_ERROR(need("ssm.conv_kernel", &conv, 64));
      if (inner % nv != 0 || nv % nk != 0) return fail("ssm.inner_size / ssm.time_step_rank / ssm.group_count are inconsistent");
      dv = inner / nv;
      c["linear_num_key_heads"] = nk;
      c["linear_num_value_heads"] = nv;
      c["linear_key_head_dim"] = dk;
      c["linear_value_head_dim"] = dv;
      c["linear_conv_kernel_dim"] = conv;
    }
  }
  c["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
  for (int64_t l = 0; l < n_layer; ++l)
    if (f.find_tensor("blk." + std::to_string(l) + ".attn_q.bias")) c["attention_bias"] = true;
  if (auto v = meta_number(f, "tokenizer.ggml.bos_token_id")) c["bos_token_id"] = int64_t(*v);
  if (auto v = meta_number(f, "tokenizer.ggml.eos_token_id")) c["eos_token_id"] = int64_t(*v);
  files->config_ = c;
  files->norms_plus_one_folded_ = info->hybrid_gdn;

  // Index maps below have one entry per row; keep them modest whatever the metadata says.
  constexpr int64_t kMaxMapRows = int64_t(1) << 22;
  if (heads * head_dim > kMaxMapRows || kv_heads * head_dim > kMaxMapRows || 2 * nk * dk + nv * dv > kMaxMapRows)
    return fail("attention or ssm dimensions are implausibly large");

  // ---- Tensors under their HF names and layouts ----
  const bool v_tiled = (arch == "qwen35" || arch == "qwen35moe") && nk > 0 && nk != nv;
  const std::vector<int64_t> vmap = v_tiled ? vhead_tiled_map(nk, nv) : std::vector<int64_t>();
  auto own = [&](size_t n) -> uint8_t* {
    files->owned_.emplace_back(n);
    return files->owned_.back().data();
  };
  auto add = [&](const std::string& name, TensorView v) -> Status {
    // Tensors sit at multiples of general.alignment, which a file may set as low as 1: a view
    // that is not aligned for its element type is copied (owned memory is malloc-aligned), so
    // no reader ever dereferences a misaligned pointer.
    const size_t align = v.dtype == DType::kF32 ? 4 : 2;
    if (reinterpret_cast<uintptr_t>(v.data) % align != 0) {
      uint8_t* d = own(v.nbytes);
      std::memcpy(d, v.data, v.nbytes);
      v.data = d;
    }
    if (!files->tensors_.emplace(name, std::move(v)).second) return fail("two GGUF tensors map to '" + name + "'");
    return Status();
  };
  // A copy of t with rows scattered back to HF order (GGUF row i -> HF row map[i]).
  auto unpermute_rows = [&](const GgufTensor& t, const TensorView& v, const std::vector<int64_t>& map) -> Result<TensorView> {
    if (int64_t(map.size()) != t.rows()) return fail("tensor '" + t.name + "' has " + std::to_string(t.rows()) + " rows, the hyper-parameters imply " + std::to_string(map.size()));
    TensorView o = v;
    uint8_t* d = own(t.nbytes);
    scatter_rows(t.data, t.row_bytes(), map, d);
    o.data = d;
    return o;
  };

  for (const GgufTensor& t : f.tensors()) {
    std::optional<std::string> hf = hf_name_for_gguf(arch, t.name);
    if (!hf) continue;  // MTP blocks, vision, rope_freqs: not ours to load
    int64_t layer = -1;
    std::string suffix = t.name;
    if (t.name.rfind("blk.", 0) == 0) {
      // hf_name_for_gguf accepted it, so the layer part is all digits; it may still be huge.
      const size_t dot = t.name.find('.', 4);
      if (dot - 4 > 6) continue;
      layer = std::stoll(t.name.substr(4, dot - 4));
      suffix = t.name.substr(dot + 1);
      if (layer >= n_layer) continue;  // nextn (MTP) blocks
    }
    auto vr = view_of(t);
    if (!vr.ok()) return fail(vr.status().message());
    TensorView v = vr.value();
    const std::string lp = "model.layers." + std::to_string(layer) + ".";

    if (suffix == "ffn_gate_exps.weight" || suffix == "ffn_up_exps.weight" || suffix == "ffn_down_exps.weight") {
      if (t.ne.size() != 3) return fail("tensor '" + t.name + "' is not 3-D");
      const std::string proj = suffix.substr(4, suffix.find("_exps") - 4);  // gate, up, down
      const size_t expert_bytes = size_t(t.ne[1]) * t.row_bytes();
      for (int64_t e = 0; e < t.ne[2]; ++e) {
        TensorView ev{v.dtype, {t.ne[1], t.ne[0]}, t.data + size_t(e) * expert_bytes, expert_bytes};
        WEFT_RETURN_IF_ERROR(add(lp + "mlp.experts." + std::to_string(e) + "." + proj + "_proj.weight", ev));
      }
      continue;
    }
    if (arch == "qwen3next" && suffix == "attn_gate.weight") continue;  // joined with attn_qkv below
    if (arch == "qwen3next" && suffix == "attn_qkv.weight") {
      const GgufTensor* z = f.find_tensor("blk." + std::to_string(layer) + ".attn_gate.weight");
      if (!z || z->type != t.type || z->cols() != t.cols()) return fail("tensor '" + t.name + "' has no matching attn_gate of its type");
      std::vector<uint8_t> joined(t.nbytes + z->nbytes);
      std::memcpy(joined.data(), t.data, t.nbytes);
      std::memcpy(joined.data() + t.nbytes, z->data, z->nbytes);
      const auto map = qwen3next_qkvz_row_map(nk, dk, nv, dv);
      if (int64_t(map.size()) != t.rows() + z->rows()) return fail("tensor '" + t.name + "' + attn_gate rows disagree with the ssm hyper-parameters");
      uint8_t* d = own(joined.size());
      scatter_rows(joined.data(), t.row_bytes(), map, d);
      TensorView o{v.dtype, {t.rows() + z->rows(), t.cols()}, d, joined.size()};
      WEFT_RETURN_IF_ERROR(add(*hf, o));
      continue;
    }
    if (suffix == "ssm_a") {
      // Stored as -exp(A_log) in f32; back to an A_log that reproduces it exactly.
      if (t.type != GgmlType::kF32 || t.numel() != nv) return fail("tensor '" + t.name + "' must be f32 [" + std::to_string(nv) + "]");
      std::vector<float> a(static_cast<size_t>(nv));
      std::memcpy(a.data(), t.data, size_t(nv) * 4);
      auto* d = reinterpret_cast<float*>(own(size_t(nv) * 4));
      for (int64_t h = 0; h < nv; ++h) d[v_tiled ? vmap[size_t(h)] : h] = a_log_from_ssm_a(a[size_t(h)]);
      WEFT_RETURN_IF_ERROR(add(*hf, TensorView{DType::kF32, {nv}, d, size_t(nv) * 4}));
      continue;
    }
    if (suffix == "ssm_conv1d.weight") {
      if (t.ne.size() != 2) return fail("tensor '" + t.name + "' is not 2-D");
      v.shape = {t.ne[1], 1, t.ne[0]};
      if (v_tiled) {
        auto r = unpermute_rows(t, v, expand_head_map(vmap, dv, 2 * nk * dk));
        if (!r.ok()) return r.status();
        v = r.value();
      }
      WEFT_RETURN_IF_ERROR(add(*hf, v));
      continue;
    }
    std::vector<int64_t> row_map;
    if (v_tiled) {
      if (suffix == "attn_qkv.weight") row_map = expand_head_map(vmap, dv, 2 * nk * dk);
      else if (suffix == "attn_gate.weight") row_map = expand_head_map(vmap, dv);
      else if (suffix == "ssm_alpha.weight" || suffix == "ssm_beta.weight" || suffix == "ssm_dt.bias") row_map = vmap;
    }
    if (arch == "llama" && (suffix == "attn_q.weight" || suffix == "attn_q.bias"))
      row_map = llama_rope_row_map(heads, head_dim);
    if (arch == "llama" && (suffix == "attn_k.weight" || suffix == "attn_k.bias"))
      row_map = llama_rope_row_map(c["num_key_value_heads"].get<int64_t>(), head_dim);
    if (!row_map.empty()) {
      // 1-D tensors (biases) are permuted element by element: one "row" per value.
      if (t.ne.size() == 1) {
        if (int64_t(row_map.size()) != t.numel()) return fail("tensor '" + t.name + "' size disagrees with the hyper-parameters");
        if (ggml_block_size(t.type) != 1) return fail("tensor '" + t.name + "' must be f32, f16 or bf16");
        uint8_t* d = own(t.nbytes);
        scatter_rows(t.data, t.nbytes / size_t(t.numel()), row_map, d);
        v.data = d;
      } else {
        auto r = unpermute_rows(t, v, row_map);
        if (!r.ok()) return r.status();
        v = r.value();
      }
    }
    if (v_tiled && suffix == "ssm_out.weight") {
      // Columns in chunks of one value head. Whole blocks per head: moved back to HF order
      // (exact). Blocks straddling heads (q4_K/q5_K/q6_K with a 64- or 128-wide value head)
      // cannot move: the matrix stays as stored and the model feeds it the value heads in the
      // file's order (input_head_order), the product llama.cpp computes on the same file.
      if (t.ne.size() != 2 || t.cols() != nv * dv) return fail("tensor '" + t.name + "' has the wrong shape");
      if (v.dtype != DType::kF32 && dv % dtype_block(v.dtype) != 0) {
        files->input_head_orders_[*hf] = vmap;
      } else {
        uint8_t* d = own(t.nbytes);
        permute_col_chunks(v.dtype, t.data, t.rows(), t.cols(), dv, vmap, /*scatter=*/true, d);
        v.data = d;
      }
    }
    WEFT_RETURN_IF_ERROR(add(*hf, v));
  }
  return files;
}

}  // namespace weft
