// RecurrentState: the per-session state of the Gated DeltaNet layers, always f32 (never
// quantized): the causal-conv window (the last kernel-1 inputs of every conv channel) and the
// delta-rule state matrix S [n_v_heads, key_head_dim, value_head_dim] per layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace weft {

struct RecurrentStateSpec {
  int64_t n_layers = 0;  // linear-attention layers only
  int64_t conv_dim = 0;
  int64_t conv_kernel = 4;
  int64_t n_v_heads = 0;
  int64_t key_head_dim = 0;
  int64_t value_head_dim = 0;
};

struct RecurrentLayerState {
  std::vector<float> conv;  // [conv_kernel - 1, conv_dim], oldest input first
  std::vector<float> ssm;   // [n_v_heads, key_head_dim, value_head_dim]
};

class RecurrentState {
 public:
  explicit RecurrentState(const RecurrentStateSpec& spec);
  const RecurrentStateSpec& spec() const { return spec_; }
  RecurrentLayerState& layer(int64_t i) { return layers_[size_t(i)]; }
  const RecurrentLayerState& layer(int64_t i) const { return layers_[size_t(i)]; }
  void reset();  // zeros: the state before any token
  size_t bytes() const;
  // Copies src's values (same spec): the snapshot/restore of a sequence's GDN state.
  void assign_from(const RecurrentState& src);

 private:
  RecurrentStateSpec spec_;
  std::vector<RecurrentLayerState> layers_;
};

}  // namespace weft
