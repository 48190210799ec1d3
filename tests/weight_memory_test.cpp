// WeightMemory (backend/weight_memory.h), the host side: the host provider's blocks and fill give
// synth_fill's bytes, and synth_in_memory routes each tensor to the right memory — matrices to the
// provider, the tensors the model reads on the host to host memory — through a provider that says
// it is not host-readable (a stand-in for the CUDA one, which tests/synth_fill_cuda_test.cu checks
// on a GPU). Runs everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/weight_memory.h"
#include "kernels/cpu/synth_fill.h"
#include "model/model.h"
#include "model/synth.h"

namespace weft {
namespace {

TEST(WeightMemory, HostFillEqualsSynthFill) {
  auto mem = make_weight_memory({Device::kCpu, 2});
  ASSERT_TRUE(mem.ok()) << mem.status().message();
  EXPECT_TRUE(mem.value()->host_accessible());
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t n : {int64_t(1), int64_t(999), kSynthChunk + 77}) {
      const SynthInit init{SynthInit::kNormal, 0.25f, 0.5f};
      const size_t bytes = dtype_bytes(dtype, size_t(n));
      auto block = mem.value()->allocate(bytes);
      ASSERT_TRUE(block.ok());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(block.value().get()) % 16, 0u);
      ASSERT_TRUE(mem.value()->fill(synth_chunks(init, seed, "w", dtype, n, block.value().get())).ok());
      std::vector<uint8_t> want(bytes);
      synth_fill(init, seed, "w", dtype, n, want.data(), 1);
      EXPECT_EQ(std::memcmp(block.value().get(), want.data(), bytes), 0) << dtype_name(dtype) << " n " << n
                                                                         << " seed " << seed;
    }
  }
  EXPECT_TRUE(mem.value()->fill({}).ok());
}

TEST(WeightMemory, ChunksCoverTheTensorOnce) {
  std::vector<uint16_t> buf(size_t(2 * kSynthChunk + 5));
  const auto chunks = synth_chunks({SynthInit::kUniform, -1.0f, 1.0f}, 3, "t", DType::kBF16, int64_t(buf.size()),
                                   buf.data());
  ASSERT_EQ(chunks.size(), 3u);
  int64_t next = 0;
  std::set<uint64_t> seeds;
  for (const SynthChunk& c : chunks) {
    EXPECT_EQ(c.dst, buf.data() + next);
    EXPECT_GE(c.count, 1);
    EXPECT_LE(c.count, kSynthChunk);
    EXPECT_EQ(c.values, SynthValues::kUniform);
    EXPECT_EQ(c.offset, -1.0f);
    EXPECT_EQ(c.scale, 2.0f);
    next += c.count;
    seeds.insert(c.seed);
  }
  EXPECT_EQ(next, int64_t(buf.size()));
  EXPECT_EQ(seeds.size(), 3u);
}

// A provider whose blocks the host must not read (like GPU memory), backed by host memory so the
// test can look: it records what it allocated and what it was asked to fill.
class RecordingMemory final : public WeightMemory {
 public:
  const char* name() const override { return "recording memory"; }
  bool host_accessible() const override { return false; }
  Result<OwnedBytes> allocate(size_t bytes) override {
    if (fail_after_ >= 0 && int(blocks_.size()) >= fail_after_) return Status::error("no more memory");
    OwnedBytes b = host_bytes(bytes);
    blocks_.insert(b.get());
    return b;
  }
  Status fill(std::span<const SynthChunk> chunks) override {
    ++fills_;
    for (const SynthChunk& c : chunks) {
      filled_.push_back(c);
      synth_fill_chunk(c);  // the host generator: this memory is host memory in disguise
    }
    return Status();
  }
  std::set<const void*> blocks_;
  std::vector<SynthChunk> filled_;
  int fills_ = 0;
  int fail_after_ = -1;
};

TEST(WeightMemory, SynthInMemoryPutsMatricesInTheProviderAndHostReadTensorsOnTheHost) {
  auto spec = synth_preset("qwen3.5-35b-a3b");
  ASSERT_TRUE(spec.ok());
  SynthOverrides o;
  o.layers = 4, o.experts = 4, o.vocab = 300, o.hidden = 128;
  ASSERT_TRUE(synth_apply_overrides(&spec.value(), o).ok());
  RecordingMemory rec;
  auto files = synth_in_memory(*spec, rec);
  ASSERT_TRUE(files.ok()) << files.status().message();
  auto host = synth_in_memory(*spec, 1);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(rec.fills_, 1);  // one fill call: on a GPU, one launch for the whole model
  std::set<const void*> filled;
  for (const SynthChunk& c : rec.filled_) filled.insert(c.dst);
  int matrices = 0, vectors = 0;
  for (const SynthTensor& t : synth_tensors(*spec)) {
    const TensorView* v = files.value()->find(t.name);
    ASSERT_NE(v, nullptr) << t.name;
    EXPECT_EQ(rec.blocks_.count(v->data), t.host_read ? 0u : 1u) << t.name;
    EXPECT_EQ(filled.count(v->data), t.host_read ? 0u : 1u) << t.name;
    EXPECT_EQ(std::memcmp(v->data, host.value()->find(t.name)->data, v->nbytes), 0) << t.name;
    (t.host_read ? vectors : matrices) += 1;
    // What Model::load reads on the host: the names it binds with Binder::vector.
    const bool vector_name = t.shape.size() == 1 || t.name.find("conv1d") != std::string::npos;
    EXPECT_EQ(t.host_read, vector_name) << t.name;
  }
  EXPECT_GT(matrices, 20);
  EXPECT_GT(vectors, 10);
  EXPECT_EQ(rec.blocks_.size(), size_t(matrices));
  // The model binds it like a checkpoint (it reads only the host tensors while binding).
  auto model = Model::load(std::move(files.value()));
  ASSERT_TRUE(model.ok()) << model.status().message();
}

TEST(WeightMemory, OutOfProviderMemoryIsAClearError) {
  auto spec = synth_preset("tiny");
  ASSERT_TRUE(spec.ok());
  RecordingMemory rec;
  rec.fail_after_ = 3;
  auto files = synth_in_memory(*spec, rec);
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.status().message().find("recording memory"), std::string::npos) << files.status().message();
  EXPECT_NE(files.status().message().find("no more memory"), std::string::npos) << files.status().message();
  EXPECT_EQ(rec.fills_, 0);
}

}  // namespace
}  // namespace weft
