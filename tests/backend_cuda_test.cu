// The CUDA backend against the transformers fixtures and against the CPU backend, and the strict
// tier's contract on the GPU: run-to-run bit identity, batch invariance (a sequence alone vs in a
// batch of several), verify = steps, prefill split invariance at multiples of 64. Every fixture
// architecture plus the shipped model. Without a GPU (CI) the GPU tests skip and say why; the
// CLI's clear error for `--device cuda` is checked there instead.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <cstdlib>

#include "backend/backend_factory.h"
#include "backend/cuda/device_weights.h"
#include "backend/moe_route_host.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "io/safetensors.h"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/cuda/weight_layout.cuh"
#include "kernels/cpu/quant_blocks.h"
#include "model/gguf_convert.h"
#include "test_util.h"

namespace weft {
namespace {

std::string fixture_dir(const std::string& name) { return test::source_dir() + "/tests/data/fixtures/" + name; }

std::string model_dir_of(const std::string& name) {
  std::ifstream in(fixture_dir(name) + "/model_dir.txt");
  std::string rel;
  if (in >> rel) return test::source_dir() + "/" + rel;
  return fixture_dir(name);
}

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = d(rng);
  return ids;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double rel_rms(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

std::vector<float> floats_of(const TensorView& t) { return std::vector<float>(t.as<float>(), t.as<float>() + t.numel()); }
std::vector<int32_t> ids_of(const TensorView& t) {
  std::vector<int32_t> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[size_t(i)] = t.dtype == DType::kI64 ? int32_t(t.as<int64_t>()[i]) : t.as<int32_t>()[i];
  return v;
}

SessionOptions options(Device device, DType kv = DType::kF16, int64_t batch = 0) {
  SessionOptions so;
  so.device = device;
  so.threads = 2;
  so.kv.k_type = so.kv.v_type = kv;
  so.batch = batch;
  return so;
}

// Teacher-forced logits of every prompt position, then one decode step per token of `steps`
// (fixed tokens, not argmax: two backends that disagree on a near-tie still see the same inputs).
std::vector<float> run(const Model& m, const SessionOptions& so, const std::vector<int32_t>& prompt,
                       const std::vector<int32_t>& steps) {
  const int64_t V = m.config().vocab_size, T = int64_t(prompt.size());
  Session s(m, so);
  std::vector<float> out(static_cast<size_t>((T + int64_t(steps.size())) * V));
  EXPECT_TRUE(s.feed(prompt.data(), T, out.data(), nullptr).ok());
  for (size_t g = 0; g < steps.size(); ++g) EXPECT_TRUE(s.step(steps[g], out.data() + (T + int64_t(g)) * V).ok());
  return out;
}

// A parameter "NAME@q8_0" is fixture NAME converted to a GGUF with q8_0 weights (what `weft
// convert --type q8_0` writes), run by every test below: the whole strict tier on the q8_0
// kernels. Its reference is its f32 twin: the same GGUF requantized to f32 (`weft quantize --type
// f32`: the dequantized weights q·d, exactly the values the GPU's q8_0 kernels multiply by), run on
// the CPU (whose own q8_0 kernels quantize the activations too, so they are not that reference).
// "NAME@q4_0" likewise with q4_0 weights (the output head and a few others q8_0, as llama.cpp's
// quantizer types them).
bool is_q8_param(const std::string& p) { return p.find('@') != std::string::npos; }
std::string base_of(const std::string& p) { return p.substr(0, p.find('@')); }
WeightScheme scheme_of(const std::string& p) {
  const std::string t = p.substr(p.find('@') + 1);
  return t == "q4_0"     ? WeightScheme::kQ4_0
         : t == "q4_k_m" ? WeightScheme::kQ4_K_M
         : t == "q5_k_m" ? WeightScheme::kQ5_K_M
                         : WeightScheme::kQ8_0;
}

class CudaBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
    std::string path = model_dir_of(GetParam());
    if (is_q8_param(GetParam())) {
      const std::string tmp = test::temp_dir("cuda_q8"), q8 = tmp + "/quantized.gguf", f32 = tmp + "/f32.gguf";
      Status s = convert_hf_to_gguf(model_dir_of(base_of(GetParam())), q8, scheme_of(GetParam()));
      ASSERT_TRUE(s.ok()) << s.message();
      s = quantize_gguf(q8, f32, WeightScheme::kF32);
      ASSERT_TRUE(s.ok()) << s.message();
      auto t = Model::load(f32);
      ASSERT_TRUE(t.ok()) << t.status().message();
      twin_ = std::move(t.value());
      path = q8;
    }
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m.value());
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> twin_;  // "@q8_0": the f32 twin (dequantized weights)
};

// The bounds of tests/fixtures_test.cpp: relative RMS < 5e-3 (f16 KV) / 1e-4 (f32 KV), argmax
// equal where the reference's top-2 margin exceeds 1e-2, greedy generation identical.
TEST_P(CudaBackendTest, MatchesTransformers) {
  if (twin_) GTEST_SKIP() << "q8_0 weights: held to their f32 twin in AgreesWithCpuBackend";
  auto f = SafetensorsFile::open(fixture_dir(GetParam()) + "/reference.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().message();
  const std::vector<int32_t> prompt = ids_of(*f->find("prompt_ids"));
  const std::vector<float> ref = floats_of(*f->find("prompt_logits"));
  const int64_t V = model_->config().vocab_size, T = int64_t(prompt.size());
  for (DType kv : {DType::kF16, DType::kF32}) {
    std::vector<float> got = run(*model_, options(Device::kCuda, kv, 16), prompt, {});
    const double err = rel_rms(got, ref);
    EXPECT_LT(err, kv == DType::kF16 ? 5e-3 : 1e-4) << dtype_name(kv);
    int64_t checked = 0, mismatch = 0;
    for (int64_t r = 0; r < T; ++r) {
      const float* rr = ref.data() + r * V;
      const int32_t best = argmax(rr, V);
      float second = -INFINITY;
      for (int64_t j = 0; j < V; ++j)
        if (j != best) second = std::max(second, rr[j]);
      if (rr[best] - second <= 1e-2f) continue;
      ++checked;
      mismatch += argmax(got.data() + r * V, V) != best;
    }
    EXPECT_EQ(mismatch, 0) << dtype_name(kv) << ": argmax differs at " << mismatch << " of " << checked;
    std::printf("[ %s cuda kv=%s ] rel_rms vs transformers %.3g\n", GetParam().c_str(), dtype_name(kv), err);
  }
  if (const TensorView* g = f->find("gen_ids")) {  // greedy generation with the cache, step by step
    const std::vector<int32_t> gen_ref = ids_of(*g);
    Session s(*model_, options(Device::kCuda));
    std::vector<float> logits(static_cast<size_t>(V));
    ASSERT_TRUE(s.feed(prompt.data(), T, nullptr, logits.data()).ok());
    std::vector<int32_t> gen;
    for (size_t i = 0; i < gen_ref.size(); ++i) {
      gen.push_back(argmax(logits.data(), V));
      if (i + 1 < gen_ref.size()) ASSERT_TRUE(s.step(gen.back(), logits.data()).ok());
    }
    EXPECT_EQ(gen, gen_ref) << "greedy generation differs from transformers";
  }
}

// f16 KV: the GPU within the fixtures' bound of the CPU. Quantized KV: a quantized row can round
// to the other level when K differs in the last bit, so the two backends are compared by their
// fidelity: each one's distance from the CPU's f16 logits must be the same to within 25%.
TEST_P(CudaBackendTest, AgreesWithCpuBackend) {
  const int64_t V = model_->config().vocab_size;
  const std::vector<int32_t> prompt = random_prompt(150, V, 7), steps = random_prompt(5, V, 8);
  if (twin_) {
    // q8_0 weights on the GPU against the CPU on their dequantized values: the fixtures' bounds
    // (f32 KV 1e-4, f16 KV 5e-3), and far from the unquantized checkpoint (the q8_0 path ran).
    for (DType kv : {DType::kF32, DType::kF16}) {
      const std::vector<float> cpu = run(*twin_, options(Device::kCpu, kv), prompt, steps);
      const std::vector<float> gpu = run(*model_, options(Device::kCuda, kv), prompt, steps);
      const double err = rel_rms(gpu, cpu);
      EXPECT_LT(err, kv == DType::kF32 ? 1e-4 : 5e-3) << dtype_name(kv);
      std::printf("[ %s kv=%s ] rel_rms cuda quantized vs cpu f32 twin %.3g\n", GetParam().c_str(), dtype_name(kv), err);
    }
    auto orig = Model::load(model_dir_of(base_of(GetParam())));
    ASSERT_TRUE(orig.ok()) << orig.status().message();
    const double q_err = rel_rms(run(*model_, options(Device::kCuda, DType::kF32), prompt, steps),
                                 run(*orig.value(), options(Device::kCpu, DType::kF32), prompt, steps));
    EXPECT_GT(q_err, 1e-4) << "the q8_0 model gives the unquantized logits: were its weights quantized?";
    std::printf("[ %s ] rel_rms cuda quantized vs the checkpoint %.3g\n", GetParam().c_str(), q_err);
    return;
  }
  const std::vector<float> cpu_f16 = run(*model_, options(Device::kCpu), prompt, steps);
  const std::vector<float> gpu_f16 = run(*model_, options(Device::kCuda), prompt, steps);
  const double err = rel_rms(gpu_f16, cpu_f16);
  EXPECT_LT(err, 5e-3);
  std::printf("[ %s kv=f16 ] rel_rms cuda vs cpu %.3g\n", GetParam().c_str(), err);
  for (DType kv : {DType::kQ8_0, DType::kQ4_0}) {
    if (!kv_type_supported(kv, model_->config().head_dim)) continue;
    const double d_cpu = rel_rms(run(*model_, options(Device::kCpu, kv), prompt, steps), cpu_f16);
    const double d_gpu = rel_rms(run(*model_, options(Device::kCuda, kv), prompt, steps), cpu_f16);
    EXPECT_LT(d_gpu, 1.25 * d_cpu + 1e-4) << dtype_name(kv);
    EXPECT_GT(d_gpu, 0.75 * d_cpu - 1e-4) << dtype_name(kv);
    std::printf("[ %s kv=%s ] rel_rms vs cpu f16: cpu %.3g, cuda %.3g\n", GetParam().c_str(), dtype_name(kv), d_cpu,
                d_gpu);
  }
}

TEST_P(CudaBackendTest, RunToRunBitIdentical) {
  const std::vector<int32_t> prompt = random_prompt(100, model_->config().vocab_size, 11);
  const std::vector<int32_t> steps = random_prompt(6, model_->config().vocab_size, 12);
  EXPECT_TRUE(same_bits(run(*model_, options(Device::kCuda), prompt, steps), run(*model_, options(Device::kCuda), prompt, steps)));
}

TEST_P(CudaBackendTest, PrefillSplitInvariantAtChunkMultiples) {
  const std::vector<int32_t> prompt = random_prompt(300, model_->config().vocab_size, 13);
  const std::vector<int32_t> steps = random_prompt(3, model_->config().vocab_size, 14);
  const std::vector<float> whole = run(*model_, options(Device::kCuda, DType::kF16, 512), prompt, steps);
  EXPECT_TRUE(same_bits(whole, run(*model_, options(Device::kCuda, DType::kF16, 64), prompt, steps)));
  EXPECT_TRUE(same_bits(whole, run(*model_, options(Device::kCuda, DType::kF16, 128), prompt, steps)));
}

TEST_P(CudaBackendTest, VerifyEqualsSteps) {
  const int64_t V = model_->config().vocab_size;
  const std::vector<int32_t> prompt = random_prompt(70, V, 17), draft = random_prompt(4, V, 19);
  Session a(*model_, options(Device::kCuda)), b(*model_, options(Device::kCuda));
  ASSERT_TRUE(a.feed(prompt.data(), int64_t(prompt.size()), nullptr, nullptr).ok());
  ASSERT_TRUE(b.feed(prompt.data(), int64_t(prompt.size()), nullptr, nullptr).ok());
  std::vector<float> steps(draft.size() * size_t(V)), verify(draft.size() * size_t(V));
  for (size_t i = 0; i < draft.size(); ++i) ASSERT_TRUE(a.step(draft[i], steps.data() + i * size_t(V)).ok());
  ASSERT_TRUE(b.verify(draft.data(), int64_t(draft.size()), verify.data()).ok());
  EXPECT_TRUE(same_bits(steps, verify));
}

TEST_P(CudaBackendTest, EachSequenceAloneEqualsInsideABatch) {
  const int64_t V = model_->config().vocab_size;
  constexpr int kSeqs = 4, kGen = 4;
  const int64_t lens[kSeqs] = {1, 63, 65, 300};
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < kSeqs; ++s) prompts.push_back(random_prompt(lens[s], V, 100 + s));
  std::vector<std::vector<float>> alone(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    Session session(*model_, options(Device::kCuda));
    std::vector<float> logits(static_cast<size_t>(V));
    ASSERT_TRUE(session.feed(prompts[s].data(), lens[s], nullptr, logits.data()).ok());
    for (int g = 0; g < kGen; ++g) {
      alone[s].insert(alone[s].end(), logits.begin(), logits.end());
      ASSERT_TRUE(session.step(argmax(logits.data(), V), logits.data()).ok());
    }
  }
  EngineOptions eo;
  eo.device = Device::kCuda;
  eo.threads = 2;
  eo.prefill_batch = 128;  // prompts share and split prefill calls
  Engine engine(*model_, eo);
  std::vector<SeqId> ids;
  std::vector<std::vector<float>> logits(kSeqs, std::vector<float>(static_cast<size_t>(V)));
  std::vector<PrefillInput> in;
  for (int s = kSeqs - 1; s >= 0; --s) {  // reversed order
    ids.insert(ids.begin(), engine.add(KvOptions{}));
  }
  for (int s = kSeqs - 1; s >= 0; --s) in.push_back({ids[size_t(s)], prompts[s].data(), lens[s], logits[s].data()});
  ASSERT_TRUE(engine.prefill(in).ok());
  std::vector<std::vector<float>> together(kSeqs);
  for (int g = 0; g < kGen; ++g) {
    std::vector<DecodeInput> step;
    for (int s = 0; s < kSeqs; ++s) {
      together[s].insert(together[s].end(), logits[s].begin(), logits[s].end());
      step.push_back({ids[size_t(s)], argmax(logits[s].data(), V), logits[s].data()});
    }
    ASSERT_TRUE(engine.decode(step).ok());
  }
  for (int s = 0; s < kSeqs; ++s) EXPECT_TRUE(same_bits(alone[s], together[s])) << "sequence " << s;
}

// The logits of decode steps after a prompt, then of `verifies` 4-row verifies of one draft (each
// verify of a shape after the first runs captured, then replayed), all concatenated: what the
// launch-mode tests below compare bit for bit between two settings of one environment switch.
std::vector<float> decode_and_verify(const Model& model, const std::vector<int32_t>& prompt,
                                     const std::vector<int32_t>& steps, const std::vector<int32_t>& draft,
                                     int verifies) {
  const int64_t V = model.config().vocab_size;
  std::vector<float> out = run(model, options(Device::kCuda), prompt, steps);
  Session s(model, options(Device::kCuda));
  EXPECT_TRUE(s.feed(prompt.data(), int64_t(prompt.size()), nullptr, nullptr).ok());
  for (int i = 0; i < verifies; ++i) {
    std::vector<float> v(draft.size() * size_t(V));
    EXPECT_TRUE(s.verify(draft.data(), int64_t(draft.size()), v.data()).ok());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// decode_and_verify with env `name` set to `off`, then to `on` (unset when null): the same bits.
void expect_same_bits_both_ways(const Model& model, const char* name, const char* off, const char* on,
                                int prompt_len, uint32_t seed, int n_steps, int verifies) {
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> prompt = random_prompt(prompt_len, V, seed), steps = random_prompt(n_steps, V, seed + 1),
                             draft = random_prompt(4, V, seed + 2);
  ASSERT_EQ(setenv(name, off, 1), 0);
  const std::vector<float> a = decode_and_verify(model, prompt, steps, draft, verifies);
  if (on) ASSERT_EQ(setenv(name, on, 1), 0);
  else unsetenv(name);
  const std::vector<float> b = decode_and_verify(model, prompt, steps, draft, verifies);
  unsetenv(name);
  EXPECT_TRUE(same_bits(a, b)) << name;
}

// Decode steps replayed from CUDA graphs give the bits of the same steps launched op by op
// (WEFT_CUDA_GRAPHS=0): the first step of a shape runs eagerly, the second is captured, the rest
// replay, so 8 steps exercise all three paths; and three verifies of 4 rows (their own graphs) too.
TEST_P(CudaBackendTest, GraphReplayEqualsEagerLaunches) {
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_GRAPHS", "0", nullptr, 40, 21, 8, 3);
}

// The fused launches of a decode step (residual add + norm, swiglu folded into the product that
// reads it, moe_gather into the expert products) give the bits of the separate kernels
// (WEFT_CUDA_FUSE=0), for one-row steps (every fold) and a 4-row verify (the batched forms).
TEST_P(CudaBackendTest, FusedLaunchesEqualSeparateKernels) {
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_FUSE", "0", nullptr, 37, 31, 5, 1);
}

// The routed experts' down projection with moe_combine and the shared expert's down projection in
// one launch (one-row steps; cuda::down_combine) gives the bits of the launches apart
// (WEFT_CUDA_FUSE_MOE_DOWN=0: down, combine, swiglu + shared down), decode steps and a verify.
TEST_P(CudaBackendTest, DownCombineEqualsSeparateLaunches) {
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_FUSE_MOE_DOWN", "0", nullptr, 33, 51, 5, 1);
}

// A one-row routing run by the last block of the router's product launch (cuda::RouteTail,
// WEFT_CUDA_FUSE_ROUTE=1; off by default) gives the bits of the routing in its own launch: decode
// steps and a verify.
TEST_P(CudaBackendTest, RoutingInTheRouterLaunchEqualsItsOwnLaunch) {
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_FUSE_ROUTE", "0", "1", 35, 61, 6, 1);
}

// The attention output gate (mul_sigmoid) staged by the blocks of the o projection that reads it
// gives the bits of its own launch (WEFT_CUDA_FUSE_GATE=0): decode steps and a verify (the
// verify's products are batched, so the gate keeps its launch there).
TEST_P(CudaBackendTest, AttentionGateInTheProductEqualsItsOwnLaunch) {
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_FUSE_GATE", "0", nullptr, 39, 71, 6, 1);
}

// The residual add + norm formed by the blocks of the products that read the norm (the layer's
// first product launch; the last block writes x, y, xn; WEFT_CUDA_FUSE_NORM=1, off by default)
// gives the bits of its own launch: decode steps (eager, captured, replayed) and a verify.
TEST_P(CudaBackendTest, ResidualNormInTheProductEqualsItsOwnLaunch) {
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_FUSE_NORM", "0", "1", 41, 101, 6, 1);
}

// down_combine reading the routing (1, the default) or the routing and its first weights (2)
// before its PDL wait gives the bits of reading everything after it (WEFT_CUDA_DOWN_EARLY=0): a
// read of the routing before its writer completed would differ here (or in the PDL test above).
TEST_P(CudaBackendTest, DownCombineEarlyReadsEqualReadsAfterTheWait) {
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_DOWN_EARLY", "0", nullptr, 43, 81, 6, 1);
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_DOWN_EARLY", "0", "2", 43, 91, 6, 1);
}

// The one-token products loading their first pass of weights before their PDL wait
// (the default) give the bits of loading them after it (WEFT_CUDA_EARLY_WEIGHTS=0): decode steps
// (eager, captured and replayed) and a verify. A product that read an activation before its wait
// would race here.
TEST_P(CudaBackendTest, EarlyWeightLoadsEqualLoadsAfterTheWait) {
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_EARLY_WEIGHTS", "0", "1", 47, 111, 6, 1);
}

// Programmatic dependent launch (kernels scheduled while their predecessor finishes) changes when
// kernels run, never what they compute: decode steps (eager, captured and replayed) and three
// 4-row verifies give the bits of plain launches (WEFT_CUDA_PDL=0). A kernel that read its
// predecessor's output before its wait would race here.
TEST_P(CudaBackendTest, DependentLaunchesEqualPlainLaunches) {
  expect_same_bits_both_ways(*model_, "WEFT_CUDA_PDL", "0", "1", 45, 41, 6, 3);
}

INSTANTIATE_TEST_SUITE_P(All, CudaBackendTest,
                         ::testing::Values("qwen35_dense", "qwen35_moe_hd256", "qwen35_moe_experts_f16",
                                           "qwen35_vl_tied_sharded", "qwen3next_moe", "qwen3_tied_f16", "llama_f32",
                                           "weft_tiny_hybrid_ref"));
// q8_0 weights: dense and MoE (256-wide heads, a shared expert), Qwen3-Next, Llama, the shipped
// model's geometry. Test names cannot hold '@': "qwen35_dense_q8_0" etc.
INSTANTIATE_TEST_SUITE_P(Q8, CudaBackendTest,
                         ::testing::Values("qwen35_dense@q8_0", "qwen35_moe_hd256@q8_0", "qwen3next_moe@q8_0",
                                           "llama_f32@q8_0", "qwen3_tied_f16@q8_0", "weft_tiny_hybrid_ref@q8_0",
                                           "qwen35_moe_hd256@q4_0", "weft_tiny_hybrid_ref@q4_0",
                                           // q4_K + q8_0; q4_K + q6_K + q8_0 (llama.cpp's Q4_K_M mix)
                                           "qwen3_tied_f16@q4_k_m", "weft_tiny_hybrid_ref@q4_k_m",
                                           // q5_K + q6_K + q8_0 (llama.cpp's Q5_K_M mix)
                                           "qwen3_tied_f16@q5_k_m", "qwen35_moe_hd256@q5_k_m",
                                           "weft_tiny_hybrid_ref@q5_k_m"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           n.replace(n.find('@'), 1, "_");
                           return n;
                         });

template <typename T>
std::vector<T> get(const T* device, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  EXPECT_EQ(cudaMemcpy(v.data(), device, v.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// Device-side routing against the host routing (the CPU backend's) on random logits of odd
// shapes: the same experts in the same order, the same expert grouping, weights and
// probabilities within an ulp or two (the GPU's exp is correctly rounded, the host's expf within
// half an ulp), exact ties to the lower expert id, and token tiles that cover every expert's rows.
TEST(CudaMoeRoute, SameRoutingAsTheHost) {
  if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  struct Shape {
    int64_t rows, E, K;
    bool renorm;
  };
  std::mt19937 rng(5);
  long long touched_expected = 0;
  long long* touched = nullptr;
  ASSERT_EQ(cudaMalloc(&touched, sizeof(long long)), cudaSuccess);
  ASSERT_EQ(cudaMemset(touched, 0, sizeof(long long)), cudaSuccess);
  for (const Shape sh : {Shape{1, 256, 8, true}, Shape{7, 60, 1, false}, Shape{300, 512, 10, true}, Shape{33, 8, 8, true}}) {
    const int64_t R = sh.rows, E = sh.E, K = sh.K, S = R * K, tiles = cuda::moe_max_tiles(R, K, E);
    // Logits on a 1/64 grid: distinct values are far apart (no near-ties for an ulp to flip),
    // equal ones are exact ties; row 0 is all equal (top-k = the k lowest ids).
    std::uniform_int_distribution<int> grid(-300, 300);
    std::vector<float> logits(size_t(R * E));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t e = 0; e < E; ++e) logits[size_t(r * E + e)] = r == 0 ? 0.5f : float(grid(rng)) / 64.0f;
    std::vector<float> host = logits;
    MoeRoutingHost h;
    BackendCounters counters;
    route_on_host(host.data(), R, E, K, sh.renorm, &h, &counters);
    touched_expected += counters.moe_experts_touched;

    std::vector<void*> bufs;
    auto dev = [&](size_t bytes) {
      void* p = nullptr;
      EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
      bufs.push_back(p);
      return p;
    };
    float* d_logits = static_cast<float*>(dev(logits.size() * 4));
    ASSERT_EQ(cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::MoeRouteOut o;
    o.slot_expert = static_cast<int32_t*>(dev(size_t(S) * 4));
    o.slot_weight = static_cast<float*>(dev(size_t(S) * 4));
    o.expert_begin = static_cast<int32_t*>(dev(size_t(E + 1) * 4));
    o.sorted_slot = static_cast<int32_t*>(dev(size_t(S) * 4));
    o.slot_pos = static_cast<int32_t*>(dev(size_t(S) * 4));
    o.tile_expert = static_cast<int32_t*>(dev(size_t(tiles) * 4));
    o.tile_t0 = static_cast<int32_t*>(dev(size_t(tiles) * 4));
    o.n_tiles = static_cast<int32_t*>(dev(4));
    o.experts_touched = touched;
    cuda::moe_route(d_logits, R, E, K, sh.renorm, o, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string what = "rows " + std::to_string(R) + ", E " + std::to_string(E) + ", k " + std::to_string(K);
    EXPECT_EQ(get(o.slot_expert, S), h.slot_expert) << what;
    EXPECT_EQ(get(o.expert_begin, E + 1), h.expert_begin) << what;
    EXPECT_EQ(get(o.sorted_slot, S), h.sorted_slot) << what;
    EXPECT_EQ(get(o.slot_pos, S), h.slot_pos) << what;
    const std::vector<float> weight = get(o.slot_weight, S), probs = get(d_logits, R * E);
    for (int64_t i = 0; i < S; ++i)
      EXPECT_NEAR(weight[size_t(i)], h.slot_weight[size_t(i)], 3e-7 * h.slot_weight[size_t(i)]) << what << " slot " << i;
    for (int64_t i = 0; i < R * E; ++i)
      ASSERT_NEAR(probs[size_t(i)], host[size_t(i)], 3e-7 * host[size_t(i)] + 1e-30) << what << " prob " << i;
    // Tiles: every expert's rows covered once, in tiles of at most 8 from its own range.
    const int32_t n_tiles = get(o.n_tiles, 1)[0];
    ASSERT_LE(n_tiles, tiles) << what;
    const std::vector<int32_t> te = get(o.tile_expert, n_tiles), t0 = get(o.tile_t0, n_tiles);
    std::vector<int64_t> covered(size_t(E), 0);
    for (int32_t i = 0; i < n_tiles; ++i) {
      const int64_t cnt = h.expert_begin[size_t(te[size_t(i)]) + 1] - h.expert_begin[size_t(te[size_t(i)])];
      EXPECT_EQ(t0[size_t(i)] % cuda::kMoeTileRows, 0);
      EXPECT_LT(t0[size_t(i)], cnt) << what;
      covered[size_t(te[size_t(i)])] += std::min<int64_t>(cuda::kMoeTileRows, cnt - t0[size_t(i)]);
    }
    for (int64_t e = 0; e < E; ++e)
      EXPECT_EQ(covered[size_t(e)], h.expert_begin[size_t(e) + 1] - h.expert_begin[size_t(e)]) << what << " expert " << e;
    for (void* p : bufs) cudaFree(p);
  }
  long long got = 0;
  ASSERT_EQ(cudaMemcpy(&got, touched, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, touched_expected);
  cudaFree(touched);
}

// The one-token products (cuda::matvec_multi: one or two rows per warp by launch size, whole
// 4096-column rows in flight for K >= 4096) give each token the bits of its row in a batched
// product (the tile kernel, T > 1), on bf16 weights of the decode shapes and odd ones; several jobs
// in one launch give the bits of each alone.
TEST(CudaMatvec, OneTokenEqualsItsRowInABatch) {
  if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t T = 5;
  for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{{2048, 4096}, {37, 4104}, {1089, 2048}, {5000, 2056}, {9, 8200}}) {
    std::vector<uint16_t> w(size_t(N * K));
    for (auto& v : w) {
      const float f = nd(rng);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      v = uint16_t(b >> 16);
    }
    std::vector<float> x(size_t(T * K));
    for (auto& v : x) v = nd(rng);
    void *dw = nullptr, *dx = nullptr, *dy = nullptr, *dy1 = nullptr;
    ASSERT_EQ(cudaMalloc(&dw, w.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, size_t(T * N) * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy1, size_t(2 * N) * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::matmul(DType::kBF16, dw, size_t(K) * 2, N, K, static_cast<float*>(dx), K, T, static_cast<float*>(dy), N, nullptr);
    const std::vector<float> batch = get(static_cast<float*>(dy), T * N);
    const std::string what = "N " + std::to_string(N) + ", K " + std::to_string(K);
    for (int64_t t = 0; t < T; ++t) {
      // Two jobs (the same matrix, two outputs) in one launch: twice the rows of the launch.
      cuda::MatvecJobs jobs;
      jobs.n = t % 2 ? 2 : 1;
      for (int j = 0; j < jobs.n; ++j)
        jobs.w[j] = dw, jobs.row_bytes[j] = size_t(K) * 2, jobs.N[j] = N, jobs.y[j] = static_cast<float*>(dy1) + j * N;
      cuda::matvec_multi(DType::kBF16, jobs, K, static_cast<float*>(dx) + t * K, nullptr);
      const std::vector<float> one = get(static_cast<float*>(dy1), jobs.n * N);
      for (int j = 0; j < jobs.n; ++j)
        EXPECT_EQ(std::memcmp(one.data() + j * N, batch.data() + t * N, size_t(N) * 4), 0) << what << ", token " << t << ", job " << j;
    }
    cudaFree(dw), cudaFree(dx), cudaFree(dy), cudaFree(dy1);
  }
}

// GGUF q8_0 (or q4_0) rows of random blocks: random f16 scales of both signs, some zero, then
// random quant bytes (every int8 value; every nibble pair).
std::vector<uint8_t> random_block_rows(DType t, int64_t rows, int64_t K, std::mt19937& rng) {
  const size_t block = t == DType::kQ4_0 ? 18 : 34;
  std::vector<uint8_t> bytes(size_t(rows * K / 32) * block);
  std::uniform_int_distribution<int> q(0, 255), pick(0, 15);
  std::normal_distribution<float> scale(0.0f, 0.01f);
  for (size_t b = 0; b < bytes.size(); b += block) {
    const uint16_t d = pick(rng) == 0 ? uint16_t(0) : f32_to_f16(scale(rng));
    std::memcpy(&bytes[b], &d, 2);
    for (size_t i = 2; i < block; ++i) bytes[b + i] = uint8_t(q(rng));
  }
  return bytes;
}
GgmlType ggml_of(DType t) {
  return t == DType::kQ4_0   ? GgmlType::kQ4_0
         : t == DType::kQ4_K ? GgmlType::kQ4_K
         : t == DType::kQ5_K ? GgmlType::kQ5_K
         : t == DType::kQ6_K ? GgmlType::kQ6_K
                             : GgmlType::kQ8_0;
}
// GGUF q4_K / q5_K / q6_K rows of random super-blocks: random bytes everywhere except the f16
// scales (d, dmin: small, both signs for q6_K's d), so every 6-bit scale and min, nibble, fifth bit
// and 2-bit pair.
std::vector<uint8_t> random_k_rows(DType t, int64_t rows, int64_t K, std::mt19937& rng) {
  const size_t block = dtype_size(t);
  std::vector<uint8_t> bytes(size_t(rows * K / 256) * block);
  std::uniform_int_distribution<int> q(0, 255);
  std::normal_distribution<float> scale(0.0f, 0.001f);
  for (auto& b : bytes) b = uint8_t(q(rng));
  for (size_t b = 0; b < bytes.size(); b += block) {
    if (t == DType::kQ4_K || t == DType::kQ5_K) {
      const uint16_t d = f32_to_f16(std::fabs(scale(rng))), dmin = f32_to_f16(std::fabs(scale(rng)));
      std::memcpy(&bytes[b], &d, 2), std::memcpy(&bytes[b + 2], &dmin, 2);
    } else {
      const uint16_t d = f32_to_f16(scale(rng));
      std::memcpy(&bytes[b + 208], &d, 2);
    }
  }
  return bytes;
}
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t K, std::mt19937& rng) {
  return dtype_block(t) == 256 ? random_k_rows(t, rows, K, rng) : random_block_rows(t, rows, K, rng);
}

// The device layouts of the block types (kernels/cuda/weight_layout.cuh) hold exactly the weights
// of GGUF's blocks: every weight of the repacked rows equals dequantize_row's, bit for bit, at odd
// row counts and row lengths of 1 to 65 blocks (q8_0, q4_0) and 1 to 9 super-blocks (q4_K, q5_K,
// q6_K).
// Host code: runs without a GPU too.
TEST(CudaWeightLayout, RepackedRowsHoldTheBlocksWeights) {
  std::mt19937 rng(5);
  const std::vector<std::pair<int64_t, int64_t>> block32{{1, 32}, {7, 96}, {3, 2048}, {5, 2080}};
  const std::vector<std::pair<int64_t, int64_t>> block256{{1, 256}, {7, 512}, {3, 2304}};
  for (const DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K})
    for (const auto& [rows, K] : dtype_block(t) == 32 ? block32 : block256) {
      const std::vector<uint8_t> gguf = random_rows(t, rows, K, rng);
      std::vector<uint8_t> dev(gguf.size(), 0xAB);
      cuda::repack_rows(t, gguf.data(), dev.data(), rows, K);
      const size_t row_bytes = dtype_bytes(t, size_t(K));
      std::vector<float> ref(static_cast<size_t>(K));
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(ggml_of(t), gguf.data() + size_t(r) * row_bytes, ref.data(), K);
        for (int64_t k = 0; k < K; ++k) {
          const float got = cuda::device_weight(t, dev.data() + size_t(r) * row_bytes, K, k);
          ASSERT_EQ(std::memcmp(&got, &ref[size_t(k)], 4), 0)
              << dtype_name(t) << ": row " << r << " of " << rows << ", K " << K << ", k " << k << ": " << got
              << " vs " << ref[size_t(k)];
        }
      }
    }
  std::vector<uint8_t> dst(256);
  EXPECT_THROW(cuda::repack_rows(DType::kQ8_0, dst.data(), dst.data(), 1, 48), std::invalid_argument);
  EXPECT_THROW(cuda::repack_rows(DType::kQ4_K, dst.data(), dst.data(), 1, 128), std::invalid_argument);
  EXPECT_THROW(cuda::repack_rows(DType::kQ5_K, dst.data(), dst.data(), 1, 384), std::invalid_argument);
  EXPECT_THROW(cuda::repack_rows(DType::kBF16, dst.data(), dst.data(), 1, 32), std::invalid_argument);
}

// Every group of 8 weights of a repacked row, formed on the GPU by the products' unpack functions
// (weight_layout.cuh: whole words, the codes gathered into bytes and turned into floats by a byte
// permute), in the way the vector loads of the products read them.
template <DType D>
__global__ void unpack_groups_kernel(const uint8_t* rows, size_t row_bytes, int64_t n_rows, int64_t K, float* out) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= n_rows * (K / 8)) return;
  const int64_t r = g / (K / 8), k = g % (K / 8) * 8;
  const uint8_t* row = rows + size_t(r) * row_bytes;
  float* o = out + r * K + k;
  const uint32_t nib = *reinterpret_cast<const uint32_t*>(row + k / 2);
  if constexpr (D == DType::kQ4_0) {
    cuda::q4_0_unpack8(nib, __half2float(__ushort_as_half(cuda::q4_0_scale_bits(row, K, k))), o);
  } else if constexpr (D == DType::kQ4_K) {
    cuda::q4_k_unpack8(nib, *reinterpret_cast<const uint4*>(row + K / 2 + 16 * (k / 256)), int((k % 256) / 32), o);
  } else if constexpr (D == DType::kQ5_K) {
    cuda::q5_k_unpack8(nib, row[K / 2 + k / 8], *reinterpret_cast<const uint4*>(cuda::q5_k_header(row, K, k)), int((k % 256) / 32), o);
  } else {
    const uint8_t* h = cuda::q6_k_header(row, K, k);
    cuda::q6_k_unpack8(nib, *reinterpret_cast<const uint16_t*>(row + K / 2 + k / 4), int(int8_t(h[(k % 256) / 16])),
                 __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(h + 16))), o);
  }
}

// ... equal dequantize_row's weights bit for bit (the layout's contract; the element-wise reads of
// RepackedRowsHoldTheBlocksWeights go through the same functions one weight at a time, so this is
// what checks the word-wide code gathering: every position of a group, every fifth-bit and
// high-pair pattern of a random row).
TEST(CudaWeightLayout, DeviceUnpackEqualsDequantizeRow) {
  if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  std::mt19937 rng(31);
  const int64_t rows = 37, K = 2048;
  for (const DType t : {DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const std::vector<uint8_t> gguf = random_rows(t, rows, K, rng);
    std::vector<uint8_t> dev(gguf.size());
    cuda::repack_rows(t, gguf.data(), dev.data(), rows, K);
    const size_t row_bytes = dtype_bytes(t, size_t(K));
    void *dw = nullptr, *dout = nullptr;
    ASSERT_EQ(cudaMalloc(&dw, dev.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dout, size_t(rows * K) * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw, dev.data(), dev.size(), cudaMemcpyHostToDevice), cudaSuccess);
    const auto* w = static_cast<const uint8_t*>(dw);
    float* o = static_cast<float*>(dout);
    const unsigned blocks = unsigned((rows * K / 8 + 255) / 256);
    switch (t) {
      case DType::kQ4_0: unpack_groups_kernel<DType::kQ4_0><<<blocks, 256>>>(w, row_bytes, rows, K, o); break;
      case DType::kQ4_K: unpack_groups_kernel<DType::kQ4_K><<<blocks, 256>>>(w, row_bytes, rows, K, o); break;
      case DType::kQ5_K: unpack_groups_kernel<DType::kQ5_K><<<blocks, 256>>>(w, row_bytes, rows, K, o); break;
      default: unpack_groups_kernel<DType::kQ6_K><<<blocks, 256>>>(w, row_bytes, rows, K, o); break;
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got(static_cast<size_t>(rows * K)), ref(static_cast<size_t>(K));
    ASSERT_EQ(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(dw), cudaFree(dout);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(ggml_of(t), gguf.data() + size_t(r) * row_bytes, ref.data(), K);
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(std::memcmp(&got[size_t(r * K + k)], &ref[size_t(k)], 4), 0)
            << dtype_name(t) << ": row " << r << ", k " << k << ": " << got[size_t(r * K + k)] << " vs " << ref[size_t(k)];
    }
  }
}

// The upload refuses, before touching the GPU (so this runs in CI too), what the kernels cannot
// read: a block-quantized matrix whose rows are not whole blocks, two quantized views of one
// range that do not share their rows (repacking one would corrupt the other), and a type the
// kernels do not take; each error names the problem.
TEST(CudaUpload, RefusesPartialBlocksOverlappingViewsAndUnknownTypes) {
  std::vector<uint8_t> bytes(4096, 0);
  const auto refused = [](const WeightSet& set) -> std::string {
    auto r = DeviceWeights::upload(set);
    return r.ok() ? std::string("(accepted)") : r.status().message();
  };
  WeightSet partial;
  partial.matrices.push_back({DType::kQ4_K, bytes.data(), 2, 384});
  EXPECT_NE(refused(partial).find("384 columns (not a multiple of its block)"), std::string::npos) << refused(partial);
  WeightSet q5;
  q5.matrices.push_back({DType::kQ5_K, bytes.data(), 1, 200});
  EXPECT_NE(refused(q5).find("q5_K matrix of 200 columns"), std::string::npos) << refused(q5);
  WeightSet overlap;  // 3 q8_0 rows of 64 (68 bytes each) and, inside them, 1 row of 96
  overlap.matrices.push_back({DType::kQ8_0, bytes.data(), 3, 64});
  overlap.matrices.push_back({DType::kQ8_0, bytes.data() + 68, 1, 96});
  EXPECT_NE(refused(overlap).find("overlap without sharing their rows"), std::string::npos) << refused(overlap);
  WeightSet shifted;  // same K, but the second view starts mid-row
  shifted.matrices.push_back({DType::kQ4_0, bytes.data(), 4, 64});
  shifted.matrices.push_back({DType::kQ4_0, bytes.data() + 18, 2, 64});
  EXPECT_NE(refused(shifted).find("overlap without sharing their rows"), std::string::npos) << refused(shifted);
  WeightSet ints;
  ints.matrices.push_back({DType::kI32, bytes.data(), 2, 8});
  EXPECT_NE(refused(ints).find("not yet on CUDA"), std::string::npos) << refused(ints);
}

// q8_0 products on the GPU: the one-token kernel (one and two jobs a launch) gives the bits of the
// token's row in the batched tile kernel, and both are the float64 product of the dequantized
// weights within fp32 rounding (|err| <= 1e-5 · Σ|w·x|), at odd sizes: N not a multiple of the
// rows of a warp or block, K of 1 to 257 blocks, rows not aligned as the type's vector loads need
// (vec_row_align: q8_0 rows of K % 128 != 0, q4_0 rows of an odd block count, q6_K rows of an odd
// super-block count: the element-wise path of the tile kernel; the one-token kernel is not used there).
// (And the same for q4_0, q4_K, q5_K and q6_K.)
TEST(CudaMatvec, BlockQuantProductsMatchTheDequantizedProduct) {
  if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t T = 5;
  const std::vector<std::pair<int64_t, int64_t>> block32_shapes{
      {2048, 4096}, {37, 4096}, {1089, 2048}, {5000, 512}, {9, 8224}, {3, 32}, {70, 2080}, {8, 8192}};
  // Super-blocks of 256: q6_K rows of an odd number of super-blocks (K = 256, 2304) are not
  // 4-byte multiples and take the tile kernel's element-wise path; K = 512 (420-byte rows, an
  // expert down projection's) takes the vector paths.
  const std::vector<std::pair<int64_t, int64_t>> block256_shapes{
      {2048, 4096}, {37, 2048}, {1089, 2048}, {5000, 512}, {9, 8192}, {3, 256}, {70, 2304}};
  for (const DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K})
  for (const auto& [N, K] : dtype_block(type) == 256 ? block256_shapes : block32_shapes) {
    const std::vector<uint8_t> gguf = random_rows(type, N, K, rng);
    std::vector<uint8_t> dev(gguf.size());
    cuda::repack_rows(type, gguf.data(), dev.data(), N, K);
    const size_t row_bytes = dtype_bytes(type, size_t(K));
    std::vector<float> x(size_t(T * K));
    for (auto& v : x) v = nd(rng);
    void *dw = nullptr, *dx = nullptr, *dy = nullptr, *dy1 = nullptr;
    ASSERT_EQ(cudaMalloc(&dw, dev.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, size_t(T * N) * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy1, size_t(2 * N) * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw, dev.data(), dev.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::matmul(type, dw, row_bytes, N, K, static_cast<float*>(dx), K, T, static_cast<float*>(dy), N, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> batch = get(static_cast<float*>(dy), T * N);
    const std::string what = std::string(dtype_name(type)) + ", N " + std::to_string(N) + ", K " + std::to_string(K);
    std::vector<float> w(static_cast<size_t>(K));
    for (int64_t n = 0; n < N; ++n) {
      dequantize_row(ggml_of(type), gguf.data() + size_t(n) * row_bytes, w.data(), K);
      for (int64_t t = 0; t < T; ++t) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          ref += double(w[size_t(k)]) * x[size_t(t * K + k)];
          mag += std::fabs(double(w[size_t(k)]) * x[size_t(t * K + k)]);
        }
        ASSERT_LE(std::fabs(batch[size_t(t * N + n)] - ref), 1e-5 * mag + 1e-30) << what << ", row " << n << ", token " << t;
      }
    }
    if (!cuda::matmul_vec_ok(type, dw, row_bytes, K, static_cast<float*>(dx), K)) {
      cudaFree(dw), cudaFree(dx), cudaFree(dy), cudaFree(dy1);
      continue;
    }
    for (int64_t t = 0; t < T; ++t) {
      cuda::MatvecJobs jobs;
      jobs.n = t % 2 ? 2 : 1;
      for (int j = 0; j < jobs.n; ++j)
        jobs.w[j] = dw, jobs.row_bytes[j] = row_bytes, jobs.N[j] = N, jobs.y[j] = static_cast<float*>(dy1) + j * N;
      cuda::matvec_multi(type, jobs, K, static_cast<float*>(dx) + t * K, nullptr);
      const std::vector<float> one = get(static_cast<float*>(dy1), jobs.n * N);
      for (int j = 0; j < jobs.n; ++j)
        EXPECT_EQ(std::memcmp(one.data() + j * N, batch.data() + t * N, size_t(N) * 4), 0) << what << ", token " << t << ", job " << j;
    }
    // Mixed weight types in one launch (MatvecJobs::mixed): a bf16 product of 3 rows before and
    // after the q8_0 one, each output the bits of its own single-type launch.
    std::vector<uint16_t> wb(size_t(3 * K));
    for (auto& v : wb) v = f32_to_bf16(nd(rng));
    void *dwb = nullptr, *dyb = nullptr, *dym = nullptr;
    ASSERT_EQ(cudaMalloc(&dwb, wb.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dyb, 3 * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dym, size_t(N + 6) * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dwb, wb.data(), wb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::MatvecJobs single;
    single.n = 1, single.w[0] = dwb, single.row_bytes[0] = size_t(K) * 2, single.N[0] = 3, single.y[0] = static_cast<float*>(dyb);
    cuda::matvec_multi(DType::kBF16, single, K, static_cast<float*>(dx), nullptr);
    const std::vector<float> ref_b = get(static_cast<float*>(dyb), 3);
    cuda::MatvecJobs mixed;
    mixed.n = 3, mixed.mixed = true;
    float* ym = static_cast<float*>(dym);
    const void* mw[3] = {dwb, dw, dwb};
    const DType mt[3] = {DType::kBF16, type, DType::kBF16};
    const int64_t mn[3] = {3, N, 3};
    float* my[3] = {ym, ym + 3, ym + 3 + N};
    for (int j = 0; j < 3; ++j)
      mixed.w[j] = mw[j], mixed.type[j] = mt[j], mixed.N[j] = mn[j], mixed.y[j] = my[j],
      mixed.row_bytes[j] = mt[j] == type ? row_bytes : size_t(K) * 2;
    cuda::matvec_multi(DType::kBF16, mixed, K, static_cast<float*>(dx), nullptr);
    const std::vector<float> got = get(ym, N + 6);
    EXPECT_EQ(std::memcmp(got.data(), ref_b.data(), 12), 0) << what << ": mixed launch, bf16 job 0";
    EXPECT_EQ(std::memcmp(got.data() + 3, batch.data(), size_t(N) * 4), 0) << what << ": mixed launch, quantized job";
    EXPECT_EQ(std::memcmp(got.data() + 3 + N, ref_b.data(), 12), 0) << what << ": mixed launch, bf16 job 2";
    cudaFree(dwb), cudaFree(dyb), cudaFree(dym);
    cudaFree(dw), cudaFree(dx), cudaFree(dy), cudaFree(dy1);
  }
}

// A one-token product whose input is x·σ(gate) staged in the launch (matvec_multi's sigmoid_gate,
// the attention output gate folded into the o projection) gives the bits of cuda::mul_sigmoid
// followed by the plain product, and leaves x ungated: odd sizes, the wide-pass size (K 4096 at
// one row per warp), two rows per warp (N 5000) and the largest staged K (8192).
TEST(CudaMatvec, SigmoidGateInTheProductEqualsMulSigmoidFirst) {
  if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{{2048, 4096}, {37, 4104}, {5000, 2056}, {9, 8192}, {3, 8}}) {
    std::vector<uint16_t> w(size_t(N * K));
    for (auto& v : w) {
      const float f = nd(rng);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      v = uint16_t(b >> 16);
    }
    std::vector<float> x(static_cast<size_t>(K)), g(static_cast<size_t>(K));
    for (auto& v : x) v = nd(rng);
    for (auto& v : g) v = 4.0f * nd(rng);
    void *dw = nullptr, *dx = nullptr, *dg = nullptr, *dy = nullptr, *dy1 = nullptr;
    ASSERT_EQ(cudaMalloc(&dw, w.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dg, g.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, size_t(N) * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy1, size_t(N) * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dg, g.data(), g.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    const std::string what = "N " + std::to_string(N) + ", K " + std::to_string(K);
    cuda::MatvecJobs jobs;
    jobs.n = 1, jobs.w[0] = dw, jobs.row_bytes[0] = size_t(K) * 2, jobs.N[0] = N, jobs.y[0] = static_cast<float*>(dy1);
    cuda::matvec_multi(DType::kBF16, jobs, K, static_cast<float*>(dx), nullptr, nullptr, nullptr, static_cast<float*>(dg));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> fused = get(static_cast<float*>(dy1), N);
    EXPECT_EQ(std::memcmp(get(static_cast<float*>(dx), K).data(), x.data(), x.size() * 4), 0) << what << ": x was written";
    cuda::mul_sigmoid(static_cast<float*>(dx), static_cast<float*>(dg), K, nullptr);
    jobs.y[0] = static_cast<float*>(dy);
    cuda::matvec_multi(DType::kBF16, jobs, K, static_cast<float*>(dx), nullptr);
    const std::vector<float> apart = get(static_cast<float*>(dy), N);
    EXPECT_EQ(std::memcmp(fused.data(), apart.data(), size_t(N) * 4), 0) << what;
    // Not a vacuous comparison: the gate changed the input (and so the result).
    const std::vector<float> gated = get(static_cast<float*>(dx), K);
    EXPECT_NE(std::memcmp(gated.data(), x.data(), x.size() * 4), 0) << what;
    cudaFree(dw), cudaFree(dx), cudaFree(dg), cudaFree(dy), cudaFree(dy1);
  }
}

// The residual add + rmsnorm formed by every block of the product launch that reads the norm
// (matvec_multi's NormInput) gives the bits of cuda::residual_rmsnorm and then the plain product:
// the product's output, and x, y and xn as written by the launch's last block; with and without
// the shared expert's gated add, plus-one weights or not, at widths of each norm block size (1024,
// 512, 256 threads), odd tails, the widest staged row and a tiny one; one and three products per
// launch; and twice in a row (the block counter resets).
TEST(CudaMatvec, ResidualNormInTheProductEqualsItsOwnLaunch) {
  if (Status s = check_device(Device::kCuda); !s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  std::mt19937 rng(37);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  unsigned* counter = nullptr;
  ASSERT_EQ(cudaMalloc(&counter, sizeof(unsigned)), cudaSuccess);
  ASSERT_EQ(cudaMemset(counter, 0, sizeof(unsigned)), cudaSuccess);
  int c = 0;
  for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{{2048, 2048}, {37, 2056}, {1089, 1024}, {300, 1000}, {9, 8192}, {5, 40}}) {
    for (const bool pre : {false, true}) {
      const bool plus_one = ++c % 2 == 0;
      const int n_jobs = c % 3 == 0 ? 3 : 1;
      std::vector<uint16_t> w(size_t(N * K));
      for (auto& v : w) {
        const float f = nd(rng);
        uint32_t b;
        std::memcpy(&b, &f, 4);
        v = uint16_t(b >> 16);
      }
      std::vector<float> x(static_cast<size_t>(K)), y(static_cast<size_t>(K)), sh(static_cast<size_t>(K)), nw(static_cast<size_t>(K));
      for (auto& v : x) v = 3.0f * nd(rng);
      for (auto& v : y) v = nd(rng);
      for (auto& v : sh) v = nd(rng);
      for (auto& v : nw) v = 0.5f * nd(rng);
      const float s_host = nd(rng);
      float *dw = nullptr, *dbuf = nullptr, *dout = nullptr;
      ASSERT_EQ(cudaMalloc(&dw, w.size() * 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dbuf, size_t(2 * (4 * K + 1)) * 4), cudaSuccess);  // two sets: x, y, sh, w, s
      ASSERT_EQ(cudaMalloc(&dout, size_t(2 * (K + 3 * N)) * 4), cudaSuccess);  // two sets: xn, 3 outputs
      ASSERT_EQ(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      float* sets[2][5];
      for (int k = 0; k < 2; ++k) {
        float* b = dbuf + k * (4 * K + 1);
        sets[k][0] = b, sets[k][1] = b + K, sets[k][2] = b + 2 * K, sets[k][3] = b + 3 * K, sets[k][4] = b + 4 * K;
        ASSERT_EQ(cudaMemcpy(sets[k][0], x.data(), size_t(K) * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(sets[k][1], y.data(), size_t(K) * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(sets[k][2], sh.data(), size_t(K) * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(sets[k][3], nw.data(), size_t(K) * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(sets[k][4], &s_host, 4, cudaMemcpyHostToDevice), cudaSuccess);
      }
      auto args = [&](int k) {
        cuda::ResidualArgs a;
        a.x = sets[k][0], a.y = sets[k][1], a.shared = pre ? sets[k][2] : nullptr, a.s = pre ? sets[k][4] : nullptr;
        a.w = sets[k][3], a.xn = dout + k * (K + 3 * N), a.rows = 1, a.n = K, a.eps = 1e-6f, a.plus_one = plus_one;
        return a;
      };
      auto jobs_for = [&](int k) {
        cuda::MatvecJobs jobs;
        jobs.n = n_jobs;
        for (int j = 0; j < n_jobs; ++j)
          jobs.w[j] = dw, jobs.row_bytes[j] = size_t(K) * 2, jobs.N[j] = N, jobs.y[j] = dout + k * (K + 3 * N) + K + j * N;
        return jobs;
      };
      // Set 0: the residual kernel, then the product of its xn. Set 1: one launch.
      cuda::residual_rmsnorm(args(0), nullptr);
      cuda::matvec_multi(DType::kBF16, jobs_for(0), K, args(0).xn, nullptr);
      const cuda::NormInput in{args(1), counter};
      cuda::matvec_multi(DType::kBF16, jobs_for(1), K, args(1).xn, nullptr, nullptr, nullptr, nullptr, &in);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::string what = "N " + std::to_string(N) + ", K " + std::to_string(K) + (pre ? ", shared" : "") +
                               (plus_one ? ", plus one" : "") + ", jobs " + std::to_string(n_jobs);
      const std::vector<float> a0 = get(dbuf, 4 * K + 1), a1 = get(dbuf + 4 * K + 1, 4 * K + 1);
      const std::vector<float> o0 = get(dout, K + 3 * N), o1 = get(dout + K + 3 * N, K + 3 * N);
      EXPECT_EQ(std::memcmp(a0.data(), a1.data(), size_t(2 * K) * 4), 0) << what << ": x, y";
      EXPECT_EQ(std::memcmp(o0.data(), o1.data(), size_t(K + n_jobs * N) * 4), 0) << what << ": xn, products";
      EXPECT_NE(std::memcmp(a0.data(), x.data(), size_t(K) * 4), 0) << what << ": x was not updated";
      EXPECT_EQ(get(counter, 1)[0], 0u) << what << ": the block counter was not reset";
      cudaFree(dw), cudaFree(dbuf), cudaFree(dout);
    }
  }
  cudaFree(counter);
}

// Runs everywhere: without a GPU (or without CUDA in the build) `--device cuda` is a clear error.
TEST(CudaDevice, CliSaysWhyWhenThereIsNoGpu) {
  if (check_device(Device::kCuda).ok()) GTEST_SKIP() << "a GPU is present";
  // Every command that runs the model takes --device (chat and serve refuse before reading stdin
  // or binding a port).
  const char* commands[] = {"generate --device cuda -p hello -n 2", "logits --device cuda --ids-file /dev/null -o /dev/null",
                            "bench --device cuda --ctx 64 --repeats 1", "fidelity --device cuda",
                            "chat --device cuda < /dev/null", "serve --device cuda --port 0"};
  for (const char* command : commands) {
    std::string out;
    const int rc = test::run_command(test::weft_binary() + " " + command + " 2>&1", &out);
    EXPECT_NE(rc, 0) << command;
    EXPECT_NE(out.find("cuda"), std::string::npos) << command << ": " << out;
    EXPECT_EQ(out.find("Segmentation"), std::string::npos) << command << ": " << out;
  }
}

TEST(CudaDevice, UnknownDeviceIsAnError) {
  EXPECT_FALSE(parse_device("tpu").ok());
  EXPECT_TRUE(parse_device("cpu").ok());
  EXPECT_TRUE(parse_device("cuda").ok());
}

}  // namespace
}  // namespace weft
