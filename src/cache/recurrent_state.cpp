#include "cache/recurrent_state.h"

namespace weft {

RecurrentState::RecurrentState(const RecurrentStateSpec& spec, PageAllocator* allocator)
    : spec_(spec), allocator_(allocator ? allocator : &host_allocator()), layers_(size_t(spec.n_layers)) {
  const size_t conv = size_t((spec.conv_kernel - 1) * spec.conv_dim);
  const size_t ssm = size_t(spec.n_v_heads * spec.key_head_dim * spec.value_head_dim);
  bytes_ = size_t(spec.n_layers) * (conv + ssm) * sizeof(float);
  if (bytes_ == 0) return;
  block_ = allocator_->allocate(bytes_);
  float* p = reinterpret_cast<float*>(block_);
  for (auto& L : layers_) {
    L.conv = std::span<float>(p, conv);
    L.ssm = std::span<float>(p + conv, ssm);
    p += conv + ssm;
  }
  reset();
}

RecurrentState::~RecurrentState() {
  if (block_) allocator_->release(block_);
}

void RecurrentState::reset() {
  if (block_) allocator_->fill_zero(block_, bytes_);
}

void RecurrentState::assign_from(const RecurrentState& src) {
  if (!block_ || block_ == src.block_) return;
  // The device side's copy reads and writes host memory too (cudaMemcpyDefault); a host
  // allocator's memcpy cannot read device memory.
  PageAllocator& by = allocator_->host_accessible() ? *src.allocator_ : *allocator_;
  by.copy(block_, src.block_, bytes_);
}

std::vector<float> RecurrentState::to_host() const {
  std::vector<float> out(bytes_ / sizeof(float));
  if (block_) allocator_->copy(reinterpret_cast<uint8_t*>(out.data()), block_, bytes_);
  return out;
}

}  // namespace weft
