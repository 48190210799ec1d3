// ModelState: the KV cache and GDN state of one sequence (see state.h).
#include "model/state.h"

#include "kernels/cpu/hadamard.h"

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

ModelState::ModelState(const ModelConfig& c, const KvOptions& kv, PageAllocator* allocator)
    : kv_options_(kv), kv_(kv_cache_spec(c, kv), allocator), recurrent_(recurrent_state_spec(c), allocator) {
  int64_t n_full = 0, n_lin = 0;
  for (LayerKind k : c.layer_kinds) slot_.push_back(k == LayerKind::kFullAttention ? n_full++ : n_lin++);
}

void ModelState::reset() {
  kv_.clear();
  recurrent_.reset();
  position_ = 0;
}

void ModelState::assign_from(const ModelState& src) {
  // A head_dim fwht cannot take is refused by forward() before any rotated row exists.
  const bool size_ok = fwht_size_ok(kv_.spec().head_dim);
  const bool flip_k = size_ok && kv_options_.rotates_k() != src.kv_options_.rotates_k();
  const bool flip_v = size_ok && kv_options_.rotates_v() != src.kv_options_.rotates_v();
  if (!flip_k && !flip_v) {
    kv_.assign_from(src.kv_);
  } else {
    // The rows are in the other basis: go through an f32 copy (exact for f16/f32 sources), apply
    // H where the rotation differs (H = H⁻¹ both ways), then encode once into this cache's types.
    KvCacheSpec spec = src.kv_.spec();
    spec.k_type = spec.v_type = DType::kF32;
    KvCache tmp(spec);
    tmp.assign_from(src.kv_);
    for (int64_t l = 0; l < spec.n_layers; ++l) {
      const KvLayerView view = tmp.view(l);
      for (int64_t h = 0; h < spec.n_kv_heads; ++h)
        for (int64_t p = 0; p < view.length; ++p) {
          // tmp is ours; the view is read-only only because kernels must not write through it.
          if (flip_k) fwht(reinterpret_cast<float*>(const_cast<uint8_t*>(view.k_row(h, p))), spec.head_dim);
          if (flip_v) fwht(reinterpret_cast<float*>(const_cast<uint8_t*>(view.v_row(h, p))), spec.head_dim);
        }
    }
    kv_.assign_from(tmp);
  }
  recurrent_.assign_from(src.recurrent_);
  position_ = src.position_;
}

Status ModelState::rewind(int64_t position, const RecurrentState& recurrent) {
  if (position < 0 || position > position_)
    return Status::error("cannot rewind to position " + std::to_string(position) + ": the sequence holds " +
                         std::to_string(position_) + " tokens");
  kv_.truncate(position);
  recurrent_.assign_from(recurrent);
  position_ = position;
  return Status();
}

Status ModelState::tile_to(int64_t position) {
  if (position == position_) return Status();
  if (!kv_.tile_to(position))
    return Status::error("cannot tile the KV cache from " + std::to_string(position_) + " to " + std::to_string(position) +
                         " tokens: the filled length must be a positive multiple of the page size (" +
                         std::to_string(kv_.spec().page_tokens) + ") and not above the target");
  position_ = position;
  return Status();
}

}  // namespace weft
