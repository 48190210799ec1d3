// DeviceWeights: one model's weights copied to GPU memory in their stored types, and the map from
// the host addresses the model hands to ops (Matrix::data, the small f32 vectors) to the copies.
//
// Ownership: forward() passes the model's WeightSet to Backend::bind_weights; the CUDA backend
// asks shared_device_weights() for the upload, which is shared by every CUDA backend of the
// process while any of them holds it (several Sessions of one model — bench arms, fidelity —
// keep one copy on the GPU, not one each). Host ranges that overlap (fused expert tensors seen
// as per-expert slices, a tied lm_head) are uploaded once. Each device range starts 256-byte
// aligned whatever the host address: safetensors pads its header to 8 bytes only, so a shard's
// tensors can sit at 8 mod 16 in the file, and a copy that kept that skew would send every product
// of the shard down the kernels' 4-byte-load path (the same bits, several times slower).
// Ranges that are GPU memory already (a synthetic model generated there by the CUDA WeightMemory,
// backend/weight_memory.h) are used in place: no copy, no range, and they stay owned by the
// ModelFiles that holds them (which frees them); resident_bytes() counts them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace weft {

class DeviceWeights {
 public:
  ~DeviceWeights();
  // Uploads every matrix and vector of `set` (block-quantized rows repacked into the kernels'
  // layouts on the way: kernels/cuda/weight_layout.cuh); an error for a type the kernels do not
  // take (kernels/cuda/weight_types.cuh), block rows that are not whole blocks, quantized views
  // that overlap without sharing their rows, or when GPU memory runs out.
  static Result<std::shared_ptr<DeviceWeights>> upload(const WeightSet& set);
  // The device address of host address `host` inside an uploaded range; `host` itself when it is
  // in none (already device memory, e.g. a scratch buffer).
  const void* translate(const void* host) const;
  size_t bytes() const { return bytes_; }            // copied here
  size_t resident_bytes() const { return resident_bytes_; }  // used in place (already device memory)

 private:
  struct Range {
    uintptr_t end = 0;
    uint8_t* device = nullptr;  // the copy of the range's first byte
  };
  std::map<uintptr_t, Range> ranges_;  // by host start
  std::vector<void*> allocations_;
  size_t bytes_ = 0;
  size_t resident_bytes_ = 0;
};

// The upload of `set` for the model whose weights are `key`, shared with other CUDA backends of
// this process that hold it.
Result<std::shared_ptr<DeviceWeights>> shared_device_weights(const void* key, const WeightSet& set);

}  // namespace weft
