// RecurrentState: the per-session state of the Gated DeltaNet layers, always f32 (never
// quantized): the causal-conv window (the last kernel-1 inputs of every conv channel) and the
// delta-rule state matrix S [n_v_heads, key_head_dim, value_head_dim] per layer.
// The values live in one block from a PageAllocator: the backend's memory (host for the CPU
// backend, device memory for CUDA), so the kernels update them where they compute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/memory.h"

namespace weft {

struct RecurrentStateSpec {
  int64_t n_layers = 0;  // linear-attention layers only
  int64_t conv_dim = 0;
  int64_t conv_kernel = 4;
  int64_t n_v_heads = 0;
  int64_t key_head_dim = 0;
  int64_t value_head_dim = 0;
};

// Views into the state's block (the allocator's memory: not host-readable on a device backend).
struct RecurrentLayerState {
  std::span<float> conv;  // [conv_kernel - 1, conv_dim], oldest input first
  std::span<float> ssm;   // [n_v_heads, key_head_dim, value_head_dim]
};

class RecurrentState {
 public:
  // Memory from `allocator` (host memory when null), zeroed.
  explicit RecurrentState(const RecurrentStateSpec& spec, PageAllocator* allocator = nullptr);
  ~RecurrentState();
  RecurrentState(const RecurrentState&) = delete;
  RecurrentState& operator=(const RecurrentState&) = delete;

  const RecurrentStateSpec& spec() const { return spec_; }
  RecurrentLayerState& layer(int64_t i) { return layers_[size_t(i)]; }
  const RecurrentLayerState& layer(int64_t i) const { return layers_[size_t(i)]; }
  void reset();  // zeros: the state before any token
  size_t bytes() const { return bytes_; }
  // Copies src's values (same spec; either may live on host or device): the snapshot/restore of
  // a sequence's GDN state.
  void assign_from(const RecurrentState& src);
  // The values as host floats (a copy when the state lives on a device), layer by layer, conv
  // then ssm: for tests and tools.
  std::vector<float> to_host() const;

 private:
  RecurrentStateSpec spec_;
  PageAllocator* allocator_;
  size_t bytes_ = 0;
  uint8_t* block_ = nullptr;
  std::vector<RecurrentLayerState> layers_;
};

}  // namespace weft
