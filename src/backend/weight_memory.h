// WeightMemory: where a backend wants the weights of a model that is made in-process rather than
// read from files (synthetic models: model/synth.h's synth_in_memory), and the generator that
// fills them there. The backend factory hands one out per device (make_weight_memory):
//   * host (CPU backend): new[] blocks, filled by the host generator on a thread pool;
//   * CUDA: cudaMalloc blocks, filled by a kernel (kernels/cuda/synth_fill.cuh), so a 70 GB model
//     never exists in host memory and is never uploaded: DeviceWeights::upload sees that its
//     ranges are device memory already and uses them in place.
// Either way the bytes are the host generator's, bit for bit (kernels/synth_fill_args.h).
// Ownership: allocate() returns an OwnedBytes carrying its deleter, so whoever holds the block
// (the in-memory ModelFiles) frees it, host or device alike; the WeightMemory itself may be
// destroyed first.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "core/owned_bytes.h"
#include "core/status.h"
#include "kernels/synth_fill_args.h"

namespace weft {

class WeightMemory {
 public:
  virtual ~WeightMemory() = default;
  // "host memory", "GPU memory": for messages.
  virtual const char* name() const = 0;
  // True when the host may read the blocks (the model binds small tensors by reading them on the
  // host, so those always take host memory: host_bytes()).
  virtual bool host_accessible() const = 0;
  // `bytes` (at least 1) aligned to at least 256 bytes on a device, 16 on the host; an error
  // when memory runs out.
  virtual Result<OwnedBytes> allocate(size_t bytes) = 0;
  // Fills every chunk (each `dst` inside a block of this memory); returns when the values are in
  // place. Chunks may be given in any order: each is seeded on its own.
  virtual Status fill(std::span<const SynthChunk> chunks) = 0;
};

// Host memory, filled on `threads` threads (0: one per hardware thread; values never depend on it).
std::unique_ptr<WeightMemory> host_weight_memory(int threads = 0);

}  // namespace weft
