#include "cache/recurrent_state.h"

#include <algorithm>

namespace weft {

RecurrentState::RecurrentState(const RecurrentStateSpec& spec) : spec_(spec), layers_(size_t(spec.n_layers)) {
  for (auto& L : layers_) {
    L.conv.assign(size_t((spec.conv_kernel - 1) * spec.conv_dim), 0.0f);
    L.ssm.assign(size_t(spec.n_v_heads * spec.key_head_dim * spec.value_head_dim), 0.0f);
  }
}

void RecurrentState::reset() {
  for (auto& L : layers_) {
    std::fill(L.conv.begin(), L.conv.end(), 0.0f);
    std::fill(L.ssm.begin(), L.ssm.end(), 0.0f);
  }
}

size_t RecurrentState::bytes() const {
  size_t n = 0;
  for (const auto& L : layers_) n += (L.conv.size() + L.ssm.size()) * sizeof(float);
  return n;
}

void RecurrentState::assign_from(const RecurrentState& src) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i].conv = src.layers_[i].conv;
    layers_[i].ssm = src.layers_[i].ssm;
  }
}

}  // namespace weft
