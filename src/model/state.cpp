#include "model/state.h"

namespace weft {

KvCacheSpec kv_cache_spec(const ModelConfig& c, const KvOptions& kv) {
  KvCacheSpec s;
  s.n_layers = c.num_full_attention_layers();
  s.n_kv_heads = c.num_key_value_heads;
  s.head_dim = c.head_dim;
  s.k_type = kv.k_type;
  s.v_type = kv.v_type;
  s.page_tokens = kv.page_tokens;
  return s;
}

RecurrentStateSpec recurrent_state_spec(const ModelConfig& c) {
  RecurrentStateSpec s;
  s.n_layers = c.num_linear_attention_layers();
  s.conv_dim = c.gdn_conv_dim();
  s.conv_kernel = c.linear_conv_kernel_dim;
  s.n_v_heads = c.linear_num_value_heads;
  s.key_head_dim = c.linear_key_head_dim;
  s.value_head_dim = c.linear_value_head_dim;
  return s;
}

ModelState::ModelState(const ModelConfig& c, const KvOptions& kv)
    : kv_(kv_cache_spec(c, kv)), recurrent_(recurrent_state_spec(c)) {
  int64_t n_full = 0, n_lin = 0;
  for (LayerKind k : c.layer_kinds) slot_.push_back(k == LayerKind::kFullAttention ? n_full++ : n_lin++);
}

void ModelState::reset() {
  kv_.clear();
  recurrent_.reset();
  position_ = 0;
}

void ModelState::assign_from(const ModelState& src) {
  kv_.assign_from(src.kv_);
  recurrent_.assign_from(src.recurrent_);
  position_ = src.position_;
}

void ModelState::rewind(int64_t position, const RecurrentState& recurrent) {
  kv_.truncate(position);
  recurrent_.assign_from(recurrent);
  position_ = position;
}

}  // namespace weft
