#include "backend/weight_memory.h"

#include <string>

#include "core/thread_pool.h"
#include "kernels/cpu/synth_fill.h"

namespace weft {

namespace {

class HostWeightMemory final : public WeightMemory {
 public:
  explicit HostWeightMemory(int threads) : threads_(threads) {}
  const char* name() const override { return "host memory"; }
  bool host_accessible() const override { return true; }
  Result<OwnedBytes> allocate(size_t bytes) override {
    OwnedBytes b = host_bytes(bytes);
    if (!b) return Status::error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    return b;
  }
  Status fill(std::span<const SynthChunk> chunks) override {
    if (chunks.empty()) return Status();
    if (!pool_) pool_ = std::make_unique<ThreadPool>(threads_);  // the first fill starts the threads
    pool_->parallel_for(int64_t(chunks.size()), [&](int64_t k) { synth_fill_chunk(chunks[size_t(k)]); });
    return Status();
  }

 private:
  int threads_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace

std::unique_ptr<WeightMemory> host_weight_memory(int threads) { return std::make_unique<HostWeightMemory>(threads); }

}  // namespace weft
