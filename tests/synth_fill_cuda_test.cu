// Synthetic weights generated in GPU memory (the CUDA WeightMemory, kernels/cuda/synth_fill.cu)
// against the host generator: the same bytes for every init kind the device generates, every
// stored type, sizes below one chunk, across chunk boundaries and at unaligned addresses; and a
// small synthetic model generated on the GPU gives the logits of the same model generated on the
// host and uploaded, bit for bit. Without a GPU the GPU tests skip and say why.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "engine/session.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_util.h"

namespace weft {
namespace {

bool on_device(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

std::unique_ptr<WeightMemory> gpu_memory() {
  auto m = make_weight_memory({Device::kCuda, 2});
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m.value()) : nullptr;
}

// The tensor `name` of n values of `init` made by the device generator, `skew` bytes past a
// 256-byte aligned address (skew = one element sends every chunk down the value-by-value path),
// copied back.
std::vector<uint8_t> device_bytes(WeightMemory& gpu, const SynthInit& init, uint64_t seed, const std::string& name,
                                  DType dtype, int64_t n, size_t skew) {
  const size_t bytes = dtype_bytes(dtype, size_t(n));
  auto block = gpu.allocate(bytes + skew);
  EXPECT_TRUE(block.ok()) << block.status().message();
  if (!block.ok()) return {};
  uint8_t* dst = block.value().get() + skew;
  // Poison first: a value the kernel skips would show as a mismatch, not as a lucky zero.
  EXPECT_EQ(cudaMemset(block.value().get(), 0xA5, bytes + skew), cudaSuccess);
  const std::vector<SynthChunk> chunks = synth_chunks(init, seed, name, dtype, n, dst);
  EXPECT_EQ(int64_t(chunks.size()), (n + kSynthChunk - 1) / kSynthChunk);
  Status st = gpu.fill(chunks);
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<uint8_t> out(bytes);
  EXPECT_EQ(cudaMemcpy(out.data(), dst, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

std::vector<uint8_t> host_bytes_of(const SynthInit& init, uint64_t seed, const std::string& name, DType dtype,
                                   int64_t n) {
  std::vector<uint8_t> out(dtype_bytes(dtype, size_t(n)), 0x5A);
  synth_fill(init, seed, name, dtype, n, out.data(), 2);
  return out;
}

TEST(SynthFillCuda, DeviceBytesEqualHostBytes) {
  if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  auto gpu = gpu_memory();
  ASSERT_NE(gpu, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();  // fresh values every run; the seed is printed on a failure
  // Normal (Irwin-Hall) with and without a mean, and uniform ranges of both signs: the inits that
  // synth_tensors gives matrices, plus the uniform ones its host-read vectors use.
  const SynthInit inits[] = {{SynthInit::kNormal, 0.0f, 0.0220970869f},
                             {SynthInit::kNormal, 0.37f, 3.1f},
                             {SynthInit::kUniform, -0.1f, 0.1f},
                             {SynthInit::kUniform, 0.9f, 1.1f}};
  // One value; fewer than 8 (no wide store); below one chunk and odd; across a chunk boundary and
  // not a multiple of 8; exactly two chunks.
  const int64_t sizes[] = {1, 7, 1000003, kSynthChunk + 12345, 2 * kSynthChunk};
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (const SynthInit& init : inits) {
      for (int64_t n : sizes) {
        // Skew by one element, never less: a float must stay 4-byte aligned (a misaligned store
        // is a sticky CUDA error that would end every test after it; the provider refuses it).
        for (size_t skew : {size_t(0), dtype_size(dtype)}) {
          if (skew && n > kSynthChunk + 12345) continue;  // the unaligned path needs no 2-chunk repeat
          const std::string name = "model.layers.3.mlp.experts.gate_up_proj";
          const std::vector<uint8_t> want = host_bytes_of(init, seed, name, dtype, n);
          const std::vector<uint8_t> got = device_bytes(*gpu, init, seed, name, dtype, n, skew);
          ASSERT_EQ(got.size(), want.size());
          size_t first = 0;
          while (first < got.size() && got[first] == want[first]) ++first;
          EXPECT_EQ(first, got.size()) << dtype_name(dtype) << " kind " << int(init.kind) << " (" << init.a << ", "
                                       << init.b << ") n " << n << " skew " << skew << " seed " << seed
                                       << ": first differing byte " << first;
        }
      }
    }
  }
}

// Chunks the device cannot make exactly are refused with a message, before any launch: log-uniform
// values (std::log has no bit-exact device twin) and a destination not aligned to its element.
TEST(SynthFillCuda, ChunksItCannotMakeExactlyAreRefused) {
  if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  auto gpu = gpu_memory();
  ASSERT_NE(gpu, nullptr);
  auto block = gpu->allocate(128);
  ASSERT_TRUE(block.ok());
  const auto log_chunks = synth_chunks({SynthInit::kLogUniform, 1.0f, 16.0f}, 1, "A_log", DType::kF32, 16,
                                       block.value().get());
  Status st = gpu->fill(log_chunks);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("host"), std::string::npos) << st.message();
  const auto skewed = synth_chunks({SynthInit::kNormal, 0.0f, 1.0f}, 1, "w", DType::kF32, 16, block.value().get() + 2);
  st = gpu->fill(skewed);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("aligned"), std::string::npos) << st.message();
  // The context is still usable: a well-formed fill after the refusals works.
  const auto good = synth_chunks({SynthInit::kNormal, 0.0f, 1.0f}, 1, "w", DType::kF32, 16, block.value().get());
  EXPECT_TRUE(gpu->fill(good).ok());
}

SynthSpec small_spec(const std::string& preset, DType dtype) {
  auto spec = synth_preset(preset);
  EXPECT_TRUE(spec.ok());
  SynthOverrides o;
  o.layers = 4;  // one full-attention layer, three GDN layers
  o.vocab = 512;
  o.hidden = 256;
  if (spec.value().is_moe()) o.experts = 8;
  EXPECT_TRUE(synth_apply_overrides(&spec.value(), o).ok());
  spec.value().dtype = dtype;
  spec.value().seed = 11;
  return spec.value();
}

std::vector<float> run(const Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& steps) {
  SessionOptions so;
  so.device = Device::kCuda;
  so.threads = 2;
  const int64_t V = m.config().vocab_size, T = int64_t(prompt.size());
  Session s(m, so);
  std::vector<float> out(size_t((T + int64_t(steps.size())) * V));
  EXPECT_TRUE(s.feed(prompt.data(), T, out.data(), nullptr).ok());
  for (size_t g = 0; g < steps.size(); ++g) EXPECT_TRUE(s.step(steps[g], out.data() + (T + int64_t(g)) * V).ok());
  return out;
}

// The model the bench builds with --device cuda (matrices generated in GPU memory, used in place)
// against the one it built before (everything in host memory, uploaded): every tensor the same
// bytes, in the memory it belongs in, and the same logits bit for bit (prefill and decode).
TEST(SynthFillCuda, ModelGeneratedOnTheGpuGivesTheHostModelsLogits) {
  if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  for (const auto& [preset, dtype] : {std::pair<std::string, DType>{"qwen3.5-35b-a3b", DType::kBF16},
                                      {"qwen3-next-80b-a3b", DType::kF16},
                                      {"qwen3.5-2b", DType::kF32}}) {
    SCOPED_TRACE(preset + " " + dtype_name(dtype));
    const SynthSpec spec = small_spec(preset, dtype);
    auto gpu = gpu_memory();
    ASSERT_NE(gpu, nullptr);
    auto dev_files = synth_in_memory(spec, *gpu);
    ASSERT_TRUE(dev_files.ok()) << dev_files.status().message();
    auto host_files = synth_in_memory(spec, 2);
    ASSERT_TRUE(host_files.ok()) << host_files.status().message();
    gpu.reset();  // the ModelFiles owns its blocks, not the WeightMemory
    int on_gpu = 0;
    for (const SynthTensor& t : synth_tensors(spec)) {
      const TensorView* d = dev_files.value()->find(t.name);
      const TensorView* h = host_files.value()->find(t.name);
      ASSERT_TRUE(d && h) << t.name;
      ASSERT_EQ(d->nbytes, h->nbytes) << t.name;
      EXPECT_EQ(on_device(d->data), !t.host_read) << t.name;
      std::vector<uint8_t> bytes(d->nbytes);
      if (t.host_read) std::memcpy(bytes.data(), d->data, d->nbytes);
      else ASSERT_EQ(cudaMemcpy(bytes.data(), d->data, d->nbytes, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(std::memcmp(bytes.data(), h->data, h->nbytes), 0) << t.name;
      on_gpu += !t.host_read;
    }
    EXPECT_GT(on_gpu, 10);
    auto dev_model = Model::load(std::move(dev_files.value()));
    ASSERT_TRUE(dev_model.ok()) << dev_model.status().message();
    auto host_model = Model::load(std::move(host_files.value()));
    ASSERT_TRUE(host_model.ok()) << host_model.status().message();
    std::mt19937 rng(std::random_device{}());
    std::vector<int32_t> prompt(37), steps(5);
    for (auto& t : prompt) t = int32_t(rng() % 512);
    for (auto& t : steps) t = int32_t(rng() % 512);
    const std::vector<float> want = run(*host_model.value(), prompt, steps);
    const std::vector<float> got = run(*dev_model.value(), prompt, steps);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  }
}

// Runs everywhere: without a GPU `bench --synthetic --device cuda` still stops with a clear error
// before generating anything.
TEST(SynthFillCuda, BenchSyntheticOnCudaSaysWhyWithoutAGpu) {
  if (check_device(Device::kCuda).ok()) GTEST_SKIP() << "a GPU is present";
  std::string out;
  const int rc = test::run_command(test::weft_binary() +
                                       " bench --device cuda --synthetic tiny --ctx 64 --repeats 1 2>&1", &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("cuda"), std::string::npos) << out;
  EXPECT_EQ(out.find("generating"), std::string::npos) << out;
  EXPECT_EQ(out.find("Segmentation"), std::string::npos) << out;
  EXPECT_FALSE(make_weight_memory({Device::kCuda, 1}).ok());
}

}  // namespace
}  // namespace weft
