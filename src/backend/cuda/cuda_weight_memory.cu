#include "backend/cuda/cuda_weight_memory.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/synth_fill.cuh"

namespace weft {

namespace {

// The deleter of every block: the ModelFiles that holds the block frees it (DeviceWeights uses
// such blocks in place and never frees them).
void free_device_bytes(uint8_t* p) { cudaFree(p); }

class CudaWeightMemory final : public WeightMemory {
 public:
  const char* name() const override { return "GPU memory"; }
  bool host_accessible() const override { return false; }

  Result<OwnedBytes> allocate(size_t bytes) override {
    void* p = nullptr;  // cudaMalloc: 256-byte aligned, as DeviceWeights' own copies are
    if (cudaError_t e = cudaMalloc(&p, bytes > 0 ? bytes : 1); e != cudaSuccess) {
      cudaGetLastError();
      return Status::error(std::string("cudaMalloc of ") + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
    }
    return OwnedBytes(static_cast<uint8_t*>(p), free_device_bytes);
  }

  Status fill(std::span<const SynthChunk> chunks) override {
    for (const SynthChunk& c : chunks) {
      if (c.values == SynthValues::kLogUniform)
        return Status::error("log-uniform values are generated on the host only (std::log has no bit-exact "
                             "device twin); keep such tensors in host memory");
      if (c.dtype != DType::kBF16 && c.dtype != DType::kF16 && c.dtype != DType::kF32)
        return Status::error(std::string("synthetic weights of type ") + dtype_name(c.dtype) +
                             " cannot be generated (bf16, f16 or f32)");
      if (c.count < 1 || c.count > kSynthChunk) return Status::error("malformed synthetic chunk");
      // A misaligned store would be a sticky error that ends the CUDA context: refuse it here.
      if (reinterpret_cast<uintptr_t>(c.dst) % dtype_size(c.dtype) != 0)
        return Status::error(std::string("synthetic chunk destination not aligned to its ") + dtype_name(c.dtype) +
                             " elements");
    }
    try {
      cuda::synth_fill(chunks.data(), int64_t(chunks.size()), cudaStreamLegacy);
    } catch (const std::runtime_error& e) {
      return Status::error(e.what());
    }
    return Status();
  }
};

}  // namespace

std::unique_ptr<WeightMemory> make_cuda_weight_memory() { return std::make_unique<CudaWeightMemory>(); }

}  // namespace weft
