// Weight binding: finds every tensor a layer needs by its Hugging Face name, checks shape and
// dtype against the config, and records each layer's kind once, so the forward pass never looks
// at names or architectures again.
#include "model/model.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/cpu/vec_convert.h"

namespace weft {

namespace {

bool is_weight_type(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || dtype_is_block_quant(t);
}

class Binder {
 public:
  Binder(const ModelFiles& files, const ModelConfig& config, std::vector<std::unique_ptr<uint8_t[]>>* copies)
      : files_(files), config_(config), copies_(copies) {}

  bool has(const std::string& name) const { return files_.find(name) != nullptr; }

  Status matrix(const std::string& name, int64_t rows, int64_t cols, Matrix* out) const {
    const TensorView* t = files_.find(name);
    if (!t) return Status::error("missing tensor '" + name + "'");
    if (!is_weight_type(t->dtype))
      return Status::error("tensor '" + name + "' has dtype " + dtype_name(t->dtype) +
                           "; weights must be f32, f16, bf16, q8_0, q4_0, q4_K, q5_K or q6_K");
    if (t->rank() != 2 || t->dim(0) != rows || t->dim(1) != cols)
      return Status::error("tensor '" + name + "' has shape " + shape_string(t->shape) + ", config implies " +
                           shape_string({rows, cols}));
    if (cols % dtype_block(t->dtype) != 0)
      return Status::error("tensor '" + name + "' rows of " + std::to_string(cols) + " values are not whole " +
                           dtype_name(t->dtype) + " blocks");
    *out = {t->dtype, aligned_data(*t), rows, cols};
    return Status();
  }

  // A 3-D tensor [n, rows, cols] (fused experts); returns the whole as a matrix of n*rows rows.
  Status stacked(const std::string& name, int64_t n, int64_t rows, int64_t cols, Matrix* out) const {
    const TensorView* t = files_.find(name);
    if (!t) return Status::error("missing tensor '" + name + "'");
    if (!is_weight_type(t->dtype) || cols % dtype_block(t->dtype) != 0)
      return Status::error("tensor '" + name + "' has unsupported dtype " + dtype_name(t->dtype));
    if (t->rank() != 3 || t->dim(0) != n || t->dim(1) != rows || t->dim(2) != cols)
      return Status::error("tensor '" + name + "' has shape " + shape_string(t->shape) + ", config implies " +
                           shape_string({n, rows, cols}));
    *out = {t->dtype, aligned_data(*t), n * rows, cols};
    return Status();
  }

  // A small vector copied to f32; `shape` is the exact expected shape.
  Status vector(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out) const {
    const TensorView* t = files_.find(name);
    if (!t) return Status::error("missing tensor '" + name + "'");
    if (t->shape != shape)
      return Status::error("tensor '" + name + "' has shape " + shape_string(t->shape) + ", config implies " +
                           shape_string(shape));
    if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16)
      return Status::error("tensor '" + name + "' has unsupported dtype " + dtype_name(t->dtype));
    out->resize(size_t(t->numel()));
    // The scalar conversion reads through memcpy: the mapped bytes may be misaligned.
    convert_row_to_f32_scalar(t->dtype, t->data, out->data(), t->numel());
    return Status();
  }

  Status mlp(const std::string& p, int64_t inter, ExpertWeights* e) const {
    const int64_t H = config_.hidden_size;
    WEFT_RETURN_IF_ERROR(matrix(p + "gate_proj.weight", inter, H, &e->gate_proj));
    WEFT_RETURN_IF_ERROR(matrix(p + "up_proj.weight", inter, H, &e->up_proj));
    return matrix(p + "down_proj.weight", H, inter, &e->down_proj);
  }

  Status attention(const std::string& p, AttentionWeights* a) const {
    const ModelConfig& c = config_;
    const int64_t H = c.hidden_size, hd = c.head_dim;
    const int64_t q_rows = c.num_attention_heads * hd * (c.attn_output_gate ? 2 : 1);
    WEFT_RETURN_IF_ERROR(matrix(p + "q_proj.weight", q_rows, H, &a->q_proj));
    WEFT_RETURN_IF_ERROR(matrix(p + "k_proj.weight", c.num_key_value_heads * hd, H, &a->k_proj));
    WEFT_RETURN_IF_ERROR(matrix(p + "v_proj.weight", c.num_key_value_heads * hd, H, &a->v_proj));
    WEFT_RETURN_IF_ERROR(matrix(p + "o_proj.weight", H, c.num_attention_heads * hd, &a->o_proj));
    if (c.attention_bias) {
      WEFT_RETURN_IF_ERROR(vector(p + "q_proj.bias", {q_rows}, &a->q_bias));
      WEFT_RETURN_IF_ERROR(vector(p + "k_proj.bias", {c.num_key_value_heads * hd}, &a->k_bias));
      WEFT_RETURN_IF_ERROR(vector(p + "v_proj.bias", {c.num_key_value_heads * hd}, &a->v_bias));
    }
    if (c.qk_norm) {
      WEFT_RETURN_IF_ERROR(vector(p + "q_norm.weight", {hd}, &a->q_norm));
      WEFT_RETURN_IF_ERROR(vector(p + "k_norm.weight", {hd}, &a->k_norm));
    }
    return Status();
  }

  Status gdn(const std::string& p, GdnWeights* g) const {
    const ModelConfig& c = config_;
    const int64_t H = c.hidden_size, nv = c.linear_num_value_heads;
    const int64_t key_dim = c.gdn_key_dim(), value_dim = c.gdn_value_dim(), conv_dim = c.gdn_conv_dim();
    if (c.gdn_packed_qkvz) {
      WEFT_RETURN_IF_ERROR(matrix(p + "in_proj_qkvz.weight", 2 * key_dim + 2 * value_dim, H, &g->in_proj_qkvz));
      WEFT_RETURN_IF_ERROR(matrix(p + "in_proj_ba.weight", 2 * nv, H, &g->in_proj_ba));
    } else {
      WEFT_RETURN_IF_ERROR(matrix(p + "in_proj_qkv.weight", conv_dim, H, &g->in_proj_qkv));
      WEFT_RETURN_IF_ERROR(matrix(p + "in_proj_z.weight", value_dim, H, &g->in_proj_z));
      WEFT_RETURN_IF_ERROR(matrix(p + "in_proj_b.weight", nv, H, &g->in_proj_b));
      WEFT_RETURN_IF_ERROR(matrix(p + "in_proj_a.weight", nv, H, &g->in_proj_a));
    }
    WEFT_RETURN_IF_ERROR(vector(p + "conv1d.weight", {conv_dim, 1, c.linear_conv_kernel_dim}, &g->conv1d));
    WEFT_RETURN_IF_ERROR(vector(p + "A_log", {nv}, &g->a_log));
    WEFT_RETURN_IF_ERROR(vector(p + "dt_bias", {nv}, &g->dt_bias));
    WEFT_RETURN_IF_ERROR(vector(p + "norm.weight", {c.linear_value_head_dim}, &g->norm));
    if (const auto* order = files_.input_head_order(p + "out_proj.weight")) {
      if (int64_t(order->size()) != nv) return Status::error("out_proj head order has the wrong size");
      g->out_proj_head_order.assign(order->begin(), order->end());
    }
    return matrix(p + "out_proj.weight", H, value_dim, &g->out_proj);
  }

  Status moe(const std::string& p, FfnWeights* f) const {
    const ModelConfig& c = config_;
    const int64_t H = c.hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
    WEFT_RETURN_IF_ERROR(matrix(p + "gate.weight", E, H, &f->router));
    f->experts.resize(size_t(E));
    if (has(p + "experts.gate_up_proj")) {
      // Fused layout (transformers 5): gate_up_proj [E, 2I, H] with gate rows first, then up;
      // down_proj [E, H, I].
      Matrix gate_up, down;
      WEFT_RETURN_IF_ERROR(stacked(p + "experts.gate_up_proj", E, 2 * I, H, &gate_up));
      WEFT_RETURN_IF_ERROR(stacked(p + "experts.down_proj", E, H, I, &down));
      for (int64_t e = 0; e < E; ++e) {
        f->experts[size_t(e)].gate_proj = gate_up.row_slice(e * 2 * I, I);
        f->experts[size_t(e)].up_proj = gate_up.row_slice(e * 2 * I + I, I);
        f->experts[size_t(e)].down_proj = down.row_slice(e * H, H);
      }
    } else {
      for (int64_t e = 0; e < E; ++e)
        WEFT_RETURN_IF_ERROR(mlp(p + "experts." + std::to_string(e) + ".", I, &f->experts[size_t(e)]));
    }
    for (const ExpertWeights& e : f->experts) {
      f->expert_gate.push_back(e.gate_proj);
      f->expert_up.push_back(e.up_proj);
      f->expert_down.push_back(e.down_proj);
    }
    if (c.shared_expert_intermediate_size > 0 || has(p + "shared_expert.gate_proj.weight")) {
      int64_t Is = c.shared_expert_intermediate_size;
      if (Is <= 0) return Status::error("checkpoint has a shared expert but config has no shared_expert_intermediate_size");
      f->has_shared_expert = true;
      WEFT_RETURN_IF_ERROR(mlp(p + "shared_expert.", Is, &f->shared_expert));
      WEFT_RETURN_IF_ERROR(matrix(p + "shared_expert_gate.weight", 1, H, &f->shared_expert_gate));
    }
    return Status();
  }

 private:
  // t's bytes, or an aligned copy of them when the mapping puts them at an address that is not
  // a multiple of the element size (see Model::load in model.h).
  const void* aligned_data(const TensorView& t) const {
    // Block types are read as 2-byte fields (f16 scales) and bytes: 2-byte alignment suffices.
    const size_t align = dtype_is_block_quant(t.dtype) ? 2 : dtype_size(t.dtype);
    if (reinterpret_cast<uintptr_t>(t.data) % align == 0) return t.data;
    copies_->emplace_back(new uint8_t[t.nbytes]);  // operator new[] aligns for every scalar type
    std::memcpy(copies_->back().get(), t.data, t.nbytes);
    return copies_->back().get();
  }

  const ModelFiles& files_;
  const ModelConfig& config_;
  std::vector<std::unique_ptr<uint8_t[]>>* copies_;
};

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& dir) {
  auto files = ModelFiles::is_gguf(dir) ? ModelFiles::open_gguf(dir) : ModelFiles::open(dir);
  if (!files.ok()) return files.status();
  return load(std::move(files.value()));
}

Result<std::unique_ptr<Model>> Model::load(std::unique_ptr<ModelFiles> files) {
  const std::string dir = files->dir();
  auto config = parse_model_config(files->config(), files->generation_config());
  if (!config.ok()) return config.status().with_context(dir);
  if (files->norms_plus_one_folded()) config.value().norm_plus_one = false;  // stored as 1 + w
  auto model = std::unique_ptr<Model>(new Model());
  model->files_ = std::move(files);
  model->config_ = std::move(config.value());
  const ModelConfig& c = model->config_;
  ModelWeights& w = model->weights_;
  Binder b(*model->files_, c, &model->aligned_copies_);
  const std::string& pre = c.tensor_prefix;
  const int64_t H = c.hidden_size, V = c.vocab_size;

  auto bind = [&]() -> Status {
    WEFT_RETURN_IF_ERROR(b.matrix(pre + "embed_tokens.weight", V, H, &w.embed_tokens));
    WEFT_RETURN_IF_ERROR(b.vector(pre + "norm.weight", {H}, &w.final_norm));
    if (b.has("lm_head.weight")) {
      WEFT_RETURN_IF_ERROR(b.matrix("lm_head.weight", V, H, &w.lm_head));
    } else if (c.tie_word_embeddings) {
      w.lm_head = w.embed_tokens;
    } else {
      return Status::error("missing tensor 'lm_head.weight' (and tie_word_embeddings is false)");
    }
    w.layers.resize(size_t(c.num_hidden_layers));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      LayerWeights& L = w.layers[size_t(i)];
      const std::string p = pre + "layers." + std::to_string(i) + ".";
      L.kind = c.layer_kinds[size_t(i)];
      L.ffn_kind = c.ffn_kinds[size_t(i)];
      WEFT_RETURN_IF_ERROR(b.vector(p + "input_layernorm.weight", {H}, &L.input_layernorm));
      WEFT_RETURN_IF_ERROR(b.vector(p + "post_attention_layernorm.weight", {H}, &L.post_attention_layernorm));
      if (L.kind == LayerKind::kFullAttention) {
        WEFT_RETURN_IF_ERROR(b.attention(p + "self_attn.", &L.attn));
      } else {
        WEFT_RETURN_IF_ERROR(b.gdn(p + "linear_attn.", &L.gdn));
      }
      if (L.ffn_kind == FfnKind::kMoe) {
        WEFT_RETURN_IF_ERROR(b.moe(p + "mlp.", &L.ffn));
      } else {
        WEFT_RETURN_IF_ERROR(b.mlp(p + "mlp.", c.intermediate_size, &L.ffn.dense));
      }
    }
    return Status();
  };
  Status s = bind();
  if (!s.ok()) return s.with_context(dir);
  return model;
}

}  // namespace weft
