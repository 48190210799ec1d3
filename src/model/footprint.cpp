#include "model/footprint.h"

#include "cache/kv_cache.h"

namespace weft {

namespace {

struct Counter {
  int64_t params = 0;
  uint64_t bytes = 0;
  std::map<std::string, uint64_t> by_type;
  void add(const Matrix& m, double fraction = 1.0) {
    params += int64_t(double(m.rows * m.cols) * fraction);
    bytes += uint64_t(double(m.bytes()) * fraction);
    by_type[dtype_name(m.dtype)] += uint64_t(double(m.bytes()) * fraction);
  }
  void add_vec(const std::vector<float>& v) {
    params += int64_t(v.size());
    bytes += v.size() * 4;
    by_type["f32"] += v.size() * 4;
  }
  void add_mlp(const ExpertWeights& e, double fraction = 1.0) {
    add(e.gate_proj, fraction);
    add(e.up_proj, fraction);
    add(e.down_proj, fraction);
  }
};

}  // namespace

uint64_t kv_bytes_per_token(const ModelConfig& c, DType k, DType v) {
  return uint64_t(c.num_full_attention_layers() * c.num_key_value_heads) *
         (kv_row_bytes(k, c.head_dim) + kv_row_bytes(v, c.head_dim));
}

Footprint compute_footprint(const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  Counter total, active, routed, routed_active;
  int64_t moe_layers = 0;
  total.add(w.embed_tokens);
  active.params += c.hidden_size;  // one embedding row is read per token
  active.bytes += w.embed_tokens.row_bytes();
  if (w.lm_head.data != w.embed_tokens.data) total.add(w.lm_head);
  active.add(w.lm_head);
  for (const LayerWeights& L : w.layers) {
    for (Counter* k : {&total, &active}) {
      k->add_vec(L.input_layernorm);
      k->add_vec(L.post_attention_layernorm);
      if (L.kind == LayerKind::kFullAttention) {
        k->add(L.attn.q_proj); k->add(L.attn.k_proj); k->add(L.attn.v_proj); k->add(L.attn.o_proj);
      } else {
        const GdnWeights& g = L.gdn;
        for (const Matrix* m : {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a, &g.in_proj_qkvz,
                                &g.in_proj_ba, &g.out_proj})
          if (m->data) k->add(*m);
        k->add_vec(g.conv1d); k->add_vec(g.a_log); k->add_vec(g.dt_bias); k->add_vec(g.norm);
      }
    }
    if (L.ffn_kind == FfnKind::kMoe) {
      const FfnWeights& f = L.ffn;
      total.add(f.router);
      active.add(f.router);
      const double frac = double(c.num_experts_per_tok) / double(c.num_experts);
      for (const ExpertWeights& e : f.experts) {
        total.add_mlp(e);
        active.add_mlp(e, frac);
        routed.add_mlp(e);
        routed_active.add_mlp(e, frac);
      }
      ++moe_layers;
      if (f.has_shared_expert) {
        total.add_mlp(f.shared_expert); active.add_mlp(f.shared_expert);
        total.add(f.shared_expert_gate); active.add(f.shared_expert_gate);
      }
    } else {
      total.add_mlp(L.ffn.dense);
      active.add_mlp(L.ffn.dense);
    }
  }
  Footprint fp;
  fp.routed_expert_bytes = routed.bytes;
  fp.active_routed_expert_bytes = routed_active.bytes;
  fp.active_routed_expert_params = routed_active.params;
  fp.moe_layers = moe_layers;
  fp.experts = c.num_experts;
  fp.total_params = total.params;
  fp.active_params = active.params;
  fp.total_weight_bytes = total.bytes;
  fp.active_weight_bytes = active.bytes;
  fp.weight_bytes_by_type = total.by_type;
  fp.gdn_state_bytes = uint64_t(c.num_linear_attention_layers()) *
                       uint64_t((c.linear_conv_kernel_dim - 1) * c.gdn_conv_dim() +
                                c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim) * 4;
  fp.full_attention_layers = c.num_full_attention_layers();
  fp.linear_attention_layers = c.num_linear_attention_layers();
  return fp;
}

}  // namespace weft
