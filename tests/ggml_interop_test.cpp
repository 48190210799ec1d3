// Interop with the real llama.cpp: weft's blocks and GGUF files checked against ggml's own code,
// loaded at run time from node-llama-cpp's prebuilt libggml-base.so (npm i -E
// node-llama-cpp@3.21.1). Found through WEFT_GGML_BASE_LIB, else tools/peers/node_modules or
// /tmp/nlc/node_modules; skipped, with a message saying how to get it, when absent.
//   * our quantizer's blocks decode identically under ggml's dequantize_row_* (the layouts match);
//   * ggml's reference quantizer's blocks decode identically under ours (we read llama.cpp files);
//   * a file from write_gguf opens in ggml's gguf reader with the same tensors and offsets;
//   * with the CPU library llama.cpp runs here (libggml-cpu-haswell.so, its AVX2 build): weft
//     quantizes activations to the very bytes ggml does (q8_0 and q8_K blocks), and every quantized
//     matrix product equals ggml's vec_dot on them up to the order of float additions — so a
//     difference between the engines on the same file is not in the matmul arithmetic.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/quant_types.h"
#include "io/gguf.h"
#include "core/cpu_features.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"
#include "test_util.h"

namespace weft {
namespace {

using RowFn = void (*)(const void*, float*, int64_t);
using QuantFn = void (*)(const float*, void*, int64_t);
struct GgufInitParams {  // gguf.h: struct gguf_init_params
  bool no_alloc;
  void** ctx;
};

class Ggml {
 public:
  static Ggml& get() {
    static Ggml g;
    return g;
  }
  bool ok() const { return handle_ != nullptr; }
  const std::string& where() const { return path_; }
  template <typename F>
  F fn(const char* name) const { return reinterpret_cast<F>(dlsym(handle_, name)); }

 private:
  Ggml() {
    std::vector<std::string> candidates;
    if (const char* e = std::getenv("WEFT_GGML_BASE_LIB")) candidates.push_back(e);
    const std::string rel = "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so";
    candidates.push_back(test::source_dir() + "/tools/peers/" + rel);
    candidates.push_back("/tmp/nlc/" + rel);
    for (const auto& c : candidates) {
      if (!std::filesystem::exists(c)) continue;
      handle_ = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle_) { path_ = c; return; }
    }
  }
  void* handle_ = nullptr;
  std::string path_;
};

#define REQUIRE_GGML()                                                                        \
  if (!Ggml::get().ok())                                                                      \
  GTEST_SKIP() << "llama.cpp's libggml-base.so not found: `npm i -E node-llama-cpp@3.21.1` in " \
                  "/tmp/nlc or tools/peers, or set WEFT_GGML_BASE_LIB"

struct TypeCase {
  GgmlType type;
  const char* deq;
  const char* quant;
  bool exact;  // ggml's dequantizer has no add that a compiler could fuse, so bits must match
};
constexpr TypeCase kCases[] = {
    {GgmlType::kQ8_0, "dequantize_row_q8_0", "quantize_row_q8_0_ref", true},
    {GgmlType::kQ4_0, "dequantize_row_q4_0", "quantize_row_q4_0_ref", true},
    {GgmlType::kQ4_K, "dequantize_row_q4_K", "quantize_row_q4_K_ref", false},
    {GgmlType::kQ5_K, "dequantize_row_q5_K", "quantize_row_q5_K_ref", false},
    {GgmlType::kQ6_K, "dequantize_row_q6_K", "quantize_row_q6_K_ref", true},
};

// q4_K / q5_K decode d1*q - m1, which ggml's build may fuse into one fma: allow that rounding.
void expect_same_decode(const TypeCase& c, const std::vector<float>& ours, const std::vector<float>& theirs,
                        const char* what) {
  ASSERT_EQ(ours.size(), theirs.size());
  int bad = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    const bool same = c.exact ? std::memcmp(&ours[i], &theirs[i], 4) == 0
                              : std::fabs(ours[i] - theirs[i]) <= 1e-6f * (std::fabs(ours[i]) + 1e-3f);
    if (!same && bad++ < 5)
      ADD_FAILURE() << what << " " << ggml_type_name(c.type) << " value " << i << ": weft " << ours[i] << " ggml " << theirs[i];
  }
  EXPECT_EQ(bad, 0);
}

TEST(GgmlInterop, OurBlocksDecodeIdenticallyInGgml) {
  REQUIRE_GGML();
  std::printf("ggml from %s\n", Ggml::get().where().c_str());
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> g(0, 1);
  const int64_t n = 256 * 24;
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng) * 0.03f;
  for (const auto& c : kCases) {
    auto deq = Ggml::get().fn<RowFn>(c.deq);
    ASSERT_NE(deq, nullptr) << c.deq;
    std::vector<uint8_t> q(ggml_row_bytes(c.type, n));
    quantize_row(c.type, x.data(), q.data(), n);
    std::vector<float> ours(n), theirs(n);
    dequantize_row(c.type, q.data(), ours.data(), n);
    deq(q.data(), theirs.data(), n);
    expect_same_decode(c, ours, theirs, "weft-quantized");
  }
}

TEST(GgmlInterop, GgmlBlocksDecodeIdenticallyInWeft) {
  REQUIRE_GGML();
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> g(0, 1);
  const int64_t n = 256 * 24;
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng) * 0.03f;
  for (const auto& c : kCases) {
    auto quant = Ggml::get().fn<QuantFn>(c.quant);
    auto deq = Ggml::get().fn<RowFn>(c.deq);
    ASSERT_NE(quant, nullptr) << c.quant;
    std::vector<uint8_t> q(ggml_row_bytes(c.type, n));
    quant(x.data(), q.data(), n);
    std::vector<float> ours(n), theirs(n);
    dequantize_row(c.type, q.data(), ours.data(), n);
    deq(q.data(), theirs.data(), n);
    expect_same_decode(c, ours, theirs, "ggml-quantized");
    // Quantizer quality side by side (informational): relative RMS error of each quantizer.
    std::vector<uint8_t> qw(q.size());
    std::vector<float> yw(n);
    quantize_row(c.type, x.data(), qw.data(), n);
    dequantize_row(c.type, qw.data(), yw.data(), n);
    double e_ggml = 0, e_weft = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      e_ggml += double(x[i] - theirs[i]) * (x[i] - theirs[i]);
      e_weft += double(x[i] - yw[i]) * (x[i] - yw[i]);
      norm += double(x[i]) * x[i];
    }
    std::printf("%-5s rel rms error: ggml quantizer %.4f, weft quantizer %.4f\n", ggml_type_name(c.type),
                std::sqrt(e_ggml / norm), std::sqrt(e_weft / norm));
  }
}

TEST(GgmlInterop, WrittenGgufOpensInGgml) {
  REQUIRE_GGML();
  auto init = Ggml::get().fn<void* (*)(const char*, GgufInitParams)>("gguf_init_from_file");
  auto n_tensors = Ggml::get().fn<int64_t (*)(const void*)>("gguf_get_n_tensors");
  auto name_of = Ggml::get().fn<const char* (*)(const void*, int64_t)>("gguf_get_tensor_name");
  auto offset_of = Ggml::get().fn<size_t (*)(const void*, int64_t)>("gguf_get_tensor_offset");
  auto data_offset = Ggml::get().fn<size_t (*)(const void*)>("gguf_get_data_offset");
  auto find_key = Ggml::get().fn<int64_t (*)(const void*, const char*)>("gguf_find_key");
  auto val_str = Ggml::get().fn<const char* (*)(const void*, int64_t)>("gguf_get_val_str");
  auto arr_n = Ggml::get().fn<size_t (*)(const void*, int64_t)>("gguf_get_arr_n");
  auto free_ctx = Ggml::get().fn<void (*)(void*)>("gguf_free");
  ASSERT_TRUE(init && n_tensors && name_of && offset_of && data_offset && find_key && val_str && arr_n && free_ctx);

  std::vector<float> f(4096, 0.25f);
  std::vector<uint8_t> q4k(ggml_row_bytes(GgmlType::kQ4_K, 512) * 3), q6k(ggml_row_bytes(GgmlType::kQ6_K, 256) * 2),
      q8(ggml_row_bytes(GgmlType::kQ8_0, 96));
  quantize_row(GgmlType::kQ4_K, f.data(), q4k.data(), 512 * 3);
  quantize_row(GgmlType::kQ6_K, f.data(), q6k.data(), 256 * 2);
  quantize_row(GgmlType::kQ8_0, f.data(), q8.data(), 96);
  const std::string path = test::temp_dir("ggml_interop") + "/m.gguf";
  Status s = write_gguf(path,
                        {{"general.architecture", GgufValue::string("qwen3")},
                         {"qwen3.block_count", GgufValue::u32(1)},
                         {"tokenizer.ggml.tokens", GgufValue::string_array({"a", "b", "c"})},
                         {"tokenizer.ggml.scores", GgufValue::f32_array({0, 0, 0})}},
                        {{"token_embd.weight", GgmlType::kQ4_K, {512, 3}, q4k.data()},
                         {"blk.0.attn_norm.weight", GgmlType::kF32, {7}, f.data()},
                         {"output.weight", GgmlType::kQ6_K, {256, 2}, q6k.data()},
                         {"blk.0.attn_q.weight", GgmlType::kQ8_0, {96}, q8.data()},
                         {"blk.0.ffn_up.weight", GgmlType::kBF16, {5, 3}, f.data()}});
  ASSERT_TRUE(s.ok()) << s.message();
  void* ctx = init(path.c_str(), GgufInitParams{true, nullptr});
  ASSERT_NE(ctx, nullptr) << "ggml's gguf reader rejected " << path;
  auto ours = GgufFile::open(path);
  ASSERT_TRUE(ours.ok());
  ASSERT_EQ(n_tensors(ctx), int64_t(ours->tensors().size()));
  EXPECT_EQ(data_offset(ctx), ours->data_offset());
  for (int64_t i = 0; i < n_tensors(ctx); ++i) {
    EXPECT_EQ(std::string(name_of(ctx, i)), ours->tensors()[size_t(i)].name);
    EXPECT_EQ(offset_of(ctx, i), ours->tensors()[size_t(i)].offset);
  }
  EXPECT_STREQ(val_str(ctx, find_key(ctx, "general.architecture")), "qwen3");
  EXPECT_EQ(arr_n(ctx, find_key(ctx, "tokenizer.ggml.tokens")), 3u);
  free_ctx(ctx);
}

using VecDotFn = void (*)(int, float*, size_t, const void*, size_t, const void*, size_t, int);

TEST(GgmlInterop, ActivationCodesAndProductsMatchGgmlCpu) {
  REQUIRE_GGML();
  if (!cpu_features().has_avx2_fma_f16c()) GTEST_SKIP() << "no AVX2: llama.cpp's haswell CPU library cannot run here";
  const std::string lib = std::filesystem::path(Ggml::get().where()).parent_path().string() + "/libggml-cpu-haswell.so";
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) GTEST_SKIP() << "cannot load " << lib << ": " << dlerror();
  if (auto init = reinterpret_cast<void (*)()>(dlsym(h, "ggml_cpu_init"))) init();
  auto q8_0 = reinterpret_cast<QuantFn>(dlsym(h, "quantize_row_q8_0"));
  auto q8_K = reinterpret_cast<QuantFn>(dlsym(h, "quantize_row_q8_K"));
  ASSERT_TRUE(q8_0 && q8_K);
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> g(0, 1);
  const int64_t K = 256 * 7, N = 37;
  // Activations with a scale per 32 values spanning 1e-3..1e2, plus blocks built to hit exact
  // halves (amax 127: x * 127 / amax = x, so 2.5 and -3.5 are ties, which go to the even code).
  std::vector<float> x(static_cast<size_t>(K));
  for (int64_t b = 0; b < K / 32; ++b) {
    const float scale = std::pow(10.0f, std::uniform_real_distribution<float>(-3, 2)(rng));
    for (int64_t i = 0; i < 32; ++i) x[size_t(b * 32 + i)] = g(rng) * scale;
  }
  for (int64_t i = 0; i < 32; ++i) x[size_t(64 + i)] = float(i % 2 ? -(i + 0.5) : (i + 0.5));
  x[64 + 31] = 127.0f;
  for (GgmlType at : {GgmlType::kQ8_0, GgmlType::kQ8_K}) {
    const GgmlType wt = at == GgmlType::kQ8_0 ? GgmlType::kQ8_0 : GgmlType::kQ4_K;
    std::vector<uint8_t> ours(ggml_row_bytes(at, K)), theirs(ours.size());
    quantize_activations(wt, x.data(), K, ours.data());
    (at == GgmlType::kQ8_0 ? q8_0 : q8_K)(x.data(), theirs.data(), K);
    EXPECT_EQ(std::memcmp(ours.data(), theirs.data(), ours.size()), 0) << ggml_type_name(at) << " activation blocks differ";
  }
  for (GgmlType wt : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const std::string sym = std::string("ggml_vec_dot_") + ggml_type_name(wt) + "_" + ggml_type_name(activation_type(wt));
    auto dot = reinterpret_cast<VecDotFn>(dlsym(h, sym.c_str()));
    ASSERT_NE(dot, nullptr) << sym;
    std::vector<float> w(static_cast<size_t>(N * K));
    for (auto& v : w) v = g(rng) * 0.02f;
    const size_t rb = ggml_row_bytes(wt, K);
    std::vector<uint8_t> wq(rb * size_t(N)), xq(ggml_row_bytes(activation_type(wt), K));
    for (int64_t n = 0; n < N; ++n) quantize_row(wt, w.data() + n * K, wq.data() + size_t(n) * rb, K);
    std::vector<float> ours(static_cast<size_t>(N)), deq(static_cast<size_t>(K)), xd(static_cast<size_t>(K));
    quant_matmul(wt, wq.data(), N, K, x.data(), K, 1, ours.data(), N, nullptr);
    quantize_activations(wt, x.data(), K, xq.data());
    dequantize_row(activation_type(wt), xq.data(), xd.data(), K);
    for (int64_t n = 0; n < N; ++n) {
      float theirs = 0;
      dot(int(K), &theirs, 0, wq.data() + size_t(n) * rb, 0, xq.data(), 0, 1);
      // Both are the exact dot product of the same dequantized weights and activation codes,
      // each rounded through its own order of float additions: a few ulps of sum |w_i x_i|.
      dequantize_row(wt, wq.data() + size_t(n) * rb, deq.data(), K);
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::fabs(double(deq[size_t(k)]) * xd[size_t(k)]);
      EXPECT_LE(std::fabs(double(ours[size_t(n)]) - theirs), 1e-5 * mag + 1e-30)
          << ggml_type_name(wt) << " row " << n << ": weft " << ours[size_t(n)] << " ggml " << theirs;
    }
  }
}

}  // namespace
}  // namespace weft
