// CUDA attention and KV append (src/kernels/cuda/attention.cuh) against the CPU:
//  * kv_append writes exactly the bytes the CPU cache writes, for f32 / f16 / q8_0 / q4_0;
//  * attention (decode T = 1, verify T = k+1, prefill T large) vs a float64 reference on the same
//    cache rows and vs the CPU kernels, by relative error, fresh random data (seed printed), odd
//    lengths, page edges, head_dim 64/128/256, GQA 1..16, every KV type (and mixed K/V types);
//  * determinism: run to run bit-identical; a call's result independent of the rest of the batch;
//    verify and prefill rows bit-identical to decode at the same position;
//  * bad calls throw;
//  * the tiled kernels (dim-parallel: f16 default; key-parallel, attention_qkeys.cu: the default
//    of every cache with a quantized K or V, mixes with f16 included), each forced on every type
//    (KeyParallelSeams; WEFT_CUDA_ATTN_KERNEL=dim|keys for the whole suite).
// Skips (and says so) without a GPU; it always compiles and links (CI has nvcc but no GPU).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cache/kv_cache.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_qkeys.cuh"

namespace weft {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU()                                                                    \
  do {                                                                                   \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device here: the CUDA attention tests need a GPU"; \
  } while (0)

void ck(cudaError_t e) {
  if (e != cudaSuccess) throw std::runtime_error(cudaGetErrorString(e));
}

// WEFT_CUDA_ATTN_NARROW=1 runs everything with the four-warp launch shape (results must not
// depend on the launch shape; the GPU script runs both).
const bool kNarrow = [] {
  const char* e = std::getenv("WEFT_CUDA_ATTN_NARROW");
  if (e && *e == '1') {
    cuda::detail::SplitTuning t = cuda::detail::split_tuning();
    t.wide = false;
    cuda::detail::set_split_tuning(t);
    return true;
  }
  return false;
}();
// WEFT_CUDA_ATTN_NODIRECT=1: quantized K/V through the f16 shared-memory tile instead of straight
// into MMA fragments (the other quantized path; both must pass).
const bool kNoDirect = [] {
  const char* e = std::getenv("WEFT_CUDA_ATTN_NODIRECT");
  if (e && *e == '1') {
    cuda::detail::SplitTuning t = cuda::detail::split_tuning();
    t.direct = false;
    cuda::detail::set_split_tuning(t);
    return true;
  }
  return false;
}();

// WEFT_CUDA_ATTN_KERNEL=dim / keys: every tiled call on the dim-parallel split kernel
// (attention_split.cu) or on the key-parallel one (attention_qkeys.cu), instead of the default by
// KV type (f16: dim-parallel, a quantized K or V: key-parallel); every setting must pass everything.
const bool kKernelForced = [] {
  const char* e = std::getenv("WEFT_CUDA_ATTN_KERNEL");
  if (!e || !*e) return false;
  cuda::detail::SplitTuning t = cuda::detail::split_tuning();
  t.keys_quant = t.keys_f16 = std::string(e) == "keys";
  cuda::detail::set_split_tuning(t);
  return true;
}();
// WEFT_CUDA_ATTN_PIPE3=1: the pipelined loop compiled for 3 blocks per SM where it fits (a
// launch shape that lost, kept for the sweep; the same bits; both must pass everything).
// WEFT_CUDA_ATTN_VWORDS=1: a q8_0 V read as words in the pipelined loop (a shape that lost, kept
// for the sweep), not as 16-bit byte pairs (the same bits; both must pass everything).
const bool kVWords = [] {
  const char* e = std::getenv("WEFT_CUDA_ATTN_VWORDS");
  if (!e || std::string(e) != "1") return false;
  cuda::detail::SplitTuning t = cuda::detail::split_tuning();
  t.qkeys_vwords = true;
  cuda::detail::set_split_tuning(t);
  return true;
}();
const bool kPipe3 = [] {
  const char* e = std::getenv("WEFT_CUDA_ATTN_PIPE3");
  if (!e || std::string(e) != "1") return false;
  cuda::detail::SplitTuning t = cuda::detail::split_tuning();
  t.qkeys_pipe3 = true;
  cuda::detail::set_split_tuning(t);
  return true;
}();
// WEFT_CUDA_ATTN_PIPELINE=0: the round-6 kernel's decode / verify calls take its plain loop
// instead of the software-pipelined one (the same bits; both must pass everything).
const bool kPlainLoop = [] {
  const char* e = std::getenv("WEFT_CUDA_ATTN_PIPELINE");
  if (!e || std::string(e) != "0") return false;
  cuda::detail::SplitTuning t = cuda::detail::split_tuning();
  t.qkeys_pipelined = false;
  cuda::detail::set_split_tuning(t);
  return true;
}();

uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* e = std::getenv("WEFT_TEST_SEED");
    const uint64_t s = e ? std::strtoull(e, nullptr, 10) : std::random_device{}();
    std::printf("[ attention_cuda_test ] seed %llu (rerun with WEFT_TEST_SEED=%llu)\n", (unsigned long long)s,
                (unsigned long long)s);
    return s;
  }();
  return seed;
}

// Device buffer (RAII).
struct DevBuf {
  void* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t bytes) : n(bytes) { ck(cudaMalloc(&p, std::max<size_t>(bytes, 1))); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

std::unique_ptr<DevBuf> upload(const void* src, size_t bytes) {
  auto b = std::make_unique<DevBuf>(bytes);
  ck(cudaMemcpy(b->p, src, bytes, cudaMemcpyHostToDevice));
  return b;
}

std::vector<float> download(const float* src, size_t n) {
  std::vector<float> v(n);
  ck(cudaMemcpy(v.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

size_t page_bytes(const KvLayerView& v) {
  return size_t(v.n_kv_heads * v.page_tokens) * (v.k_row_bytes + v.v_row_bytes);
}

// One layer's cache on the CPU (filled by the CPU's append) and its copy in device pages.
struct Layer {
  std::unique_ptr<KvCache> cpu;
  std::vector<std::unique_ptr<DevBuf>> pages;
  std::unique_ptr<DevBuf> table;  // device array of device page pointers
  KvLayerView host_view, dev_view;
  std::vector<float> k, v;  // the f32 rows appended, [len, n_kv, hd]
};

// Blocks of 32 values with the inputs a quantizer can get wrong: all zeros, all -0, the largest
// magnitude twice with both signs (either first), subnormals only, equal values, and one value far
// above the rest (its f16 scale overflows for q8_0). (No NaN: the CPU's lround of one is
// unspecified.)
void plant_edge_blocks(std::vector<float>& x, std::mt19937_64& rng) {
  for (size_t b = 0; b + 32 <= x.size(); b += 32) {
    float* v = x.data() + b;
    const size_t j1 = rng() % 32, j2 = (j1 + 1 + rng() % 31) % 32;
    switch ((b / 32) % 9) {
      case 0: for (int j = 0; j < 32; ++j) v[j] = 0.0f; break;
      case 1: for (int j = 0; j < 32; ++j) v[j] = -0.0f; break;
      case 2: v[j1] = 3.5f, v[j2] = -3.5f; break;
      case 3: v[j1] = -2.25f, v[j2] = 2.25f; break;
      case 4: v[j1] = 0.0f, v[j2] = -0.0f; break;
      case 5: for (int j = 0; j < 32; ++j) v[j] = float(int(rng() % 7) - 3) * 1e-40f; break;
      case 6: for (int j = 0; j < 32; ++j) v[j] = -1.5f; break;
      case 7: v[j1] = 1e7f; break;
      default: break;  // ordinary random values
    }
  }
}

std::unique_ptr<Layer> make_layer(int64_t len, int64_t n_kv, int64_t hd, DType kt, DType vt, int64_t page_tokens,
                                  std::mt19937_64& rng, bool edge_blocks = false) {
  auto L = std::make_unique<Layer>();
  KvCacheSpec spec;
  spec.n_layers = 1;
  spec.n_kv_heads = n_kv;
  spec.head_dim = hd;
  spec.k_type = kt;
  spec.v_type = vt;
  spec.page_tokens = page_tokens;
  L->cpu = std::make_unique<KvCache>(spec);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  L->k.resize(size_t(len * n_kv * hd));
  L->v.resize(L->k.size());
  for (auto& x : L->k) x = nd(rng);
  for (auto& x : L->v) x = nd(rng);
  // A few outlier channels, as real keys have.
  for (size_t i = 0; i < L->k.size(); i += 97) L->k[i] *= 6.0f;
  if (edge_blocks) {
    plant_edge_blocks(L->k, rng);
    plant_edge_blocks(L->v, rng);
  }
  L->cpu->append(0, L->k.data(), L->v.data(), len);
  L->host_view = L->cpu->view(0);
  const size_t pb = page_bytes(L->host_view);
  std::vector<const uint8_t*> table;
  for (int64_t i = 0; i < L->host_view.n_pages; ++i) {
    L->pages.push_back(upload(L->host_view.pages[i], pb));
    table.push_back(L->pages.back()->as<uint8_t>());
  }
  L->table = upload(table.data(), table.size() * sizeof(void*));
  L->dev_view = L->host_view;
  L->dev_view.pages = L->table->as<const uint8_t* const>();
  return L;
}

std::vector<float> random_q(int64_t T, int64_t n_heads, int64_t hd, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(size_t(T * n_heads * hd));
  for (auto& x : q) x = nd(rng);
  return q;
}

// Runs the GPU attention for one call (host q), returns the output.
std::vector<float> gpu_attention(const Layer& L, const std::vector<float>& q, int64_t T, int64_t pos0,
                                 int64_t n_heads) {
  const int64_t hd = L.dev_view.head_dim;
  auto dq = upload(q.data(), q.size() * sizeof(float));
  DevBuf dout(size_t(T * n_heads * hd) * sizeof(float));
  AttentionCall c;
  c.kv = L.dev_view;
  c.args.q = dq->as<float>();
  c.args.T = T;
  c.args.pos0 = pos0;
  c.args.n_heads = n_heads;
  c.args.scale = 1.0f / std::sqrt(float(hd));
  c.args.out = dout.as<float>();
  DevBuf ws(cuda::attention_workspace_bytes(&c, 1));
  cuda::attention(&c, 1, ws.p, nullptr);
  ck(cudaDeviceSynchronize());
  return download(dout.as<float>(), size_t(T * n_heads * hd));
}

// CPU attention on the same cache: the float64 reference, or the CPU's own kernel.
std::vector<float> cpu_attention(const Layer& L, const std::vector<float>& q, int64_t T, int64_t pos0,
                                 int64_t n_heads, bool reference) {
  const int64_t hd = L.host_view.head_dim;
  std::vector<float> out(size_t(T * n_heads * hd));
  AttentionArgs a;
  a.q = q.data();
  a.T = T;
  a.pos0 = pos0;
  a.n_heads = n_heads;
  a.scale = 1.0f / std::sqrt(float(hd));
  a.out = out.data();
  const KvLayerView& v = L.host_view;
  if (reference) attention_reference(v, a, nullptr);
  else if (v.k_type == DType::kF16 && v.v_type == DType::kF16) attention_f16(v, a, nullptr);
  else attention_quant(v, a, nullptr);
  return out;
}

// max |a − b| / max |v| (the CPU tests' measure).
double rel_error(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& v) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num = std::max(num, double(std::fabs(a[i] - b[i])));
  for (float x : v) den = std::max(den, double(std::fabs(x)));
  return num / den;
}

bool has_nonfinite(const std::vector<float>& a) {
  return std::any_of(a.begin(), a.end(), [](float x) { return !std::isfinite(x); });
}

const char* type_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    default: return "?";
  }
}

// GPU kernel error vs float64 on the same (dequantized) cache rows. f16 rows are used exactly;
// quantized rows are rounded to f16 once after dequantization (q·d), ~2^-12 relative.
double gpu_bound(DType k, DType v) {
  const bool quant = k != DType::kF16 || v != DType::kF16;
  return quant ? 3e-3 : 1e-4;
}
// GPU vs the CPU's kernel: the CPU quantizes the query to q8 for quantized K (attention_quant.h:
// up to 2e-2 against float64), so the bound is the CPU's. With an f16 K and a quantized V the GPU
// rounds each q·d of V and each P to f16 (2^-11 relative at most, ~2^-12 typical) where the CPU
// keeps f32: a context of a few hundred keys (or one key that dominates) leaves up to ~7e-4 of
// max|v| of that (measured 1.5e-4 at 65..337 keys), so 1e-3; f16 K and V: 1e-4.
double cpu_kernel_bound(DType k, DType v) {
  if (k != DType::kF16) return 2.5e-2;
  return v != DType::kF16 ? 1e-3 : 1e-4;
}

struct Case {
  int64_t ctx, hd, n_kv, group, page_tokens;
  DType k, v;
};

std::string describe(const Case& c, int64_t T) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "ctx %lld hd %lld n_kv %lld group %lld page %lld K %s V %s T %lld", (long long)c.ctx,
                (long long)c.hd, (long long)c.n_kv, (long long)c.group, (long long)c.page_tokens, type_name(c.k),
                type_name(c.v), (long long)T);
  return buf;
}

// Checks T query rows at the end of the context against the CPU, and returns the GPU output.
std::vector<float> check_case(const Case& c, int64_t T, std::mt19937_64& rng, const Layer* shared = nullptr) {
  std::unique_ptr<Layer> own;
  if (!shared) own = make_layer(c.ctx, c.n_kv, c.hd, c.k, c.v, c.page_tokens, rng);
  const Layer& L = shared ? *shared : *own;
  const int64_t n_heads = c.n_kv * c.group, pos0 = c.ctx - T;
  const auto q = random_q(T, n_heads, c.hd, rng);
  const auto gpu = gpu_attention(L, q, T, pos0, n_heads);
  const auto ref = cpu_attention(L, q, T, pos0, n_heads, true);
  EXPECT_FALSE(has_nonfinite(gpu)) << describe(c, T);
  const double e_ref = rel_error(gpu, ref, L.v);
  EXPECT_LE(e_ref, gpu_bound(c.k, c.v)) << describe(c, T) << " (vs float64)";
  if (c.k != DType::kF32 && c.v != DType::kF32 && c.hd % 32 == 0) {
    const auto cpu = cpu_attention(L, q, T, pos0, n_heads, false);
    EXPECT_LE(rel_error(gpu, cpu, L.v), cpu_kernel_bound(c.k, c.v)) << describe(c, T) << " (vs the CPU kernel)";
  }
  return gpu;
}

const DType kTypes[] = {DType::kF16, DType::kQ8_0, DType::kQ4_0};
// K/V pairs that mix f16 with a quantized type (the key-parallel kernel's f16 K / f16 V paths).
const std::pair<DType, DType> kMixedF16[] = {{DType::kF16, DType::kQ8_0},
                                             {DType::kQ8_0, DType::kF16},
                                             {DType::kF16, DType::kQ4_0},
                                             {DType::kQ4_0, DType::kF16}};

TEST(AttentionCuda, KvAppendWritesTheCpuBytes) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  for (bool edge : {false, true})
  for (DType kt : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0})
    for (int64_t hd : {64, 256}) {
      const int64_t len = 300, n_kv = 2, pt = 64;
      const DType vt = kt == DType::kQ4_0 ? DType::kQ8_0 : kt == DType::kQ8_0 ? DType::kQ4_0 : kt;
      auto L = make_layer(len, n_kv, hd, kt, vt, pt, rng, edge);
      // Zeroed device pages, filled by the GPU append in three pieces (1, 70, rest rows).
      const size_t pb = page_bytes(L->host_view);
      for (auto& p : L->pages) ck(cudaMemset(p->p, 0, pb));
      auto dk = upload(L->k.data(), L->k.size() * 4), dv = upload(L->v.data(), L->v.size() * 4);
      const int64_t cuts[] = {0, 1, 71, len};
      for (int i = 0; i < 3; ++i) {
        const int64_t off = cuts[i] * n_kv * hd;
        cuda::kv_append(L->dev_view, cuts[i], dk->as<float>() + off, dv->as<float>() + off, cuts[i + 1] - cuts[i],
                        nullptr);
      }
      ck(cudaDeviceSynchronize());
      const KvLayerView& hv = L->host_view;
      std::vector<uint8_t> page(pb);
      int64_t bad = 0;
      for (int64_t pos = 0; pos < len; ++pos) {
        if (pos % pt == 0) ck(cudaMemcpy(page.data(), L->pages[size_t(pos / pt)]->p, pb, cudaMemcpyDeviceToHost));
        for (int64_t h = 0; h < n_kv; ++h) {
          const size_t ko = size_t(hv.k_row(h, pos) - hv.pages[pos / pt]);
          const size_t vo = size_t(hv.v_row(h, pos) - hv.pages[pos / pt]);
          bad += std::memcmp(page.data() + ko, hv.k_row(h, pos), hv.k_row_bytes) != 0;
          bad += std::memcmp(page.data() + vo, hv.v_row(h, pos), hv.v_row_bytes) != 0;
        }
      }
      EXPECT_EQ(bad, 0) << "K " << type_name(kt) << " V " << type_name(vt) << " hd " << hd
                        << (edge ? " (edge blocks)" : "") << ": rows differ";
    }
}

TEST(AttentionCuda, DecodeMatchesCpuEveryType) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 1);
  // Odd lengths, page edges (page 32 and 256), head_dim 256 and GQA 8 (Qwen3.5-35B-A3B), more.
  for (DType t : kTypes) {
    check_case({1, 256, 2, 8, 256, t, t}, 1, rng);
    check_case({33, 128, 1, 1, 32, t, t}, 1, rng);
    check_case({256, 256, 2, 8, 256, t, t}, 1, rng);
    check_case({257, 64, 4, 4, 32, t, t}, 1, rng);
    check_case({2100, 256, 2, 8, 256, t, t}, 1, rng);
    check_case({1299, 128, 2, 16, 64, t, t}, 1, rng);
    check_case({513, 64, 3, 2, 96, t, t}, 1, rng);
    check_case({4700, 256, 2, 8, 256, t, t}, 1, rng);    // two fold groups of 16 splits
    check_case({40001, 128, 2, 8, 256, t, t}, 1, rng);   // blocks walk several splits
  }
  // Mixed K/V types.
  check_case({700, 128, 2, 4, 64, DType::kQ8_0, DType::kF16}, 1, rng);
  check_case({700, 256, 2, 8, 256, DType::kF16, DType::kQ4_0}, 1, rng);
  check_case({700, 128, 2, 8, 128, DType::kQ4_0, DType::kQ8_0}, 1, rng);
  for (const auto& [k, v] : kMixedF16) {
    check_case({4700, 256, 2, 8, 256, k, v}, 1, rng);  // two fold groups, blocks walk splits
    check_case({1025, 64, 3, 2, 96, k, v}, 1, rng);
  }
}

TEST(AttentionCuda, VerifyAndPrefillMatchCpu) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 2);
  for (DType t : kTypes) {
    check_case({600, 256, 2, 8, 256, t, t}, 2, rng);   // 16 rows per kv head
    check_case({601, 256, 2, 8, 256, t, t}, 3, rng);   // 24 rows
    check_case({777, 256, 2, 8, 64, t, t}, 8, rng);    // 64 rows: still one pass over the KV
    check_case({300, 128, 2, 8, 32, t, t}, 16, rng);   // 128 rows: the prefill path
    check_case({211, 64, 1, 4, 32, t, t}, 211, rng);   // prefill from position 0
    check_case({1030, 256, 2, 8, 256, t, t}, 77, rng);
    check_case({4400, 128, 2, 8, 64, t, t}, 20, rng);  // prefill over two fold groups
  }
  for (const auto& [k, v] : kMixedF16) {
    check_case({600, 256, 2, 8, 256, k, v}, 2, rng);   // verify, two n-tiles
    check_case({1030, 256, 2, 8, 256, k, v}, 77, rng);  // prefill: the in-block fold
  }
}

TEST(AttentionCuda, SimpleKernelCoversTheRest) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 3);
  check_case({300, 128, 2, 4, 256, DType::kF32, DType::kF32}, 1, rng);  // f32 cache
  check_case({300, 128, 2, 4, 48, DType::kQ8_0, DType::kQ8_0}, 3, rng);  // page not a multiple of 32
  check_case({100, 96, 2, 2, 32, DType::kF16, DType::kF16}, 1, rng);    // head_dim 96
}

// Verify rows (T = k+1) and prefill rows carry exactly the bits of decode at their positions.
TEST(AttentionCuda, VerifyAndPrefillRowsEqualDecodeBits) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 4);
  std::vector<std::pair<DType, DType>> pairs;
  for (DType t : kTypes) pairs.push_back({t, t});
  pairs.push_back(kMixedF16[0]);
  pairs.push_back(kMixedF16[3]);
  for (const auto& [kt, vt] : pairs)
    for (int64_t T : {5, 100}) {
      const DType t = kt;
      const Case c{t == DType::kQ8_0 ? 40000 : 4700, 256, 2, 8, 256, kt, vt};  // 2 and 10 fold groups
      auto L = make_layer(c.ctx, c.n_kv, c.hd, kt, vt, c.page_tokens, rng);
      const int64_t n_heads = 16, pos0 = c.ctx - T, row = n_heads * c.hd;
      const auto q = random_q(T, n_heads, c.hd, rng);
      const auto multi = gpu_attention(*L, q, T, pos0, n_heads);
      for (int64_t i : {int64_t(0), T / 2, T - 1}) {
        const std::vector<float> qi(q.begin() + i * row, q.begin() + (i + 1) * row);
        const auto one = gpu_attention(*L, qi, 1, pos0 + i, n_heads);
        EXPECT_EQ(std::memcmp(one.data(), multi.data() + i * row, size_t(row) * 4), 0)
            << describe(c, T) << ": row " << i << " differs from decode";
      }
    }
}

// The same call twice gives the same bits; and alone or inside a batch of other calls (other
// lengths, types, head sizes, T), its output is the same bits.
TEST(AttentionCuda, DeterministicAndBatchInvariant) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 5);
  std::vector<std::pair<DType, DType>> pairs;
  for (DType t : kTypes) pairs.push_back({t, t});
  pairs.push_back(kMixedF16[1]);
  pairs.push_back(kMixedF16[2]);
  for (const auto& [t, tv] : pairs) {
    auto A = make_layer(3001, 2, 256, t, tv, 256, rng);
    auto B = make_layer(517, 2, 256, DType::kF16, DType::kF16, 256, rng);
    auto C = make_layer(1200, 4, 128, DType::kQ4_0, DType::kQ8_0, 64, rng);
    const auto qa = random_q(1, 16, 256, rng), qb = random_q(4, 16, 256, rng), qc = random_q(1, 16, 128, rng);
    const auto alone1 = gpu_attention(*A, qa, 1, 3000, 16);
    const auto alone2 = gpu_attention(*A, qa, 1, 3000, 16);
    EXPECT_EQ(std::memcmp(alone1.data(), alone2.data(), alone1.size() * 4), 0) << type_name(t) << ": run to run";

    auto dqa = upload(qa.data(), qa.size() * 4), dqb = upload(qb.data(), qb.size() * 4),
         dqc = upload(qc.data(), qc.size() * 4);
    DevBuf oa(qa.size() * 4), ob(qb.size() * 4), oc(qc.size() * 4);
    AttentionCall calls[3];
    calls[0].kv = B->dev_view;
    calls[0].args = {dqb->as<float>(), 4, 513, 16, 1.0f / 16, ob.as<float>()};
    calls[1].kv = A->dev_view;
    calls[1].args = {dqa->as<float>(), 1, 3000, 16, 1.0f / 16, oa.as<float>()};
    calls[2].kv = C->dev_view;
    calls[2].args = {dqc->as<float>(), 1, 1199, 16, 1.0f / std::sqrt(128.0f), oc.as<float>()};
    DevBuf ws(cuda::attention_workspace_bytes(calls, 3));
    cuda::attention(calls, 3, ws.p, nullptr);
    ck(cudaDeviceSynchronize());
    const auto batched = download(oa.as<float>(), qa.size());
    EXPECT_EQ(std::memcmp(alone1.data(), batched.data(), alone1.size() * 4), 0) << type_name(t) << ": in a batch";

    // The pipeline depth and the splits a block walks never change a bit.
    const cuda::detail::SplitTuning saved = cuda::detail::split_tuning();
    cuda::detail::SplitTuning other = saved;
    other.max_stages = 2;
    other.blocks_per_sm = 1;
    other.keys_blocks_per_sm = 1;
    other.smem_target = 220 * 1024;
    other.keys_smem_target = 220 * 1024;
    cuda::detail::set_split_tuning(other);
    const auto reshaped = gpu_attention(*A, qa, 1, 3000, 16);
    cuda::detail::set_split_tuning(saved);
    EXPECT_EQ(std::memcmp(alone1.data(), reshaped.data(), alone1.size() * 4), 0) << type_name(t) << ": launch shape";
  }
  // A deep call: blocks walk 2 (default) or 3 splits (one block per SM).
  auto D = make_layer(40001, 2, 128, DType::kQ4_0, DType::kQ4_0, 256, rng);
  const auto qd = random_q(1, 16, 128, rng);
  const auto base = gpu_attention(*D, qd, 1, 40000, 16);
  const cuda::detail::SplitTuning saved = cuda::detail::split_tuning();
  cuda::detail::SplitTuning other = saved;
  other.blocks_per_sm = 1;
  other.keys_blocks_per_sm = 1;
  other.max_stages = 3;
  cuda::detail::set_split_tuning(other);
  const auto reshaped = gpu_attention(*D, qd, 1, 40000, 16);
  cuda::detail::set_split_tuning(saved);
  EXPECT_EQ(std::memcmp(base.data(), reshaped.data(), base.size() * 4), 0) << "deep call: launch shape";
}

// The key-parallel kernel's own seams: 16-key warp sub-tiles and 64-key tiles cut by odd lengths
// and 32-token pages, GQA groups that leave padding rows (1, 3, 12) or fill two n-tiles (16),
// verify calls of several row groups, mixed K and V types (q8_0 / q4_0, and with f16); and both
// tiled kernels (key-parallel, dim-parallel) on the same calls, each within the bounds (they are
// different kernels: their bits differ, their accuracy must not).
TEST(AttentionCuda, KeyParallelSeams) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 7);
  const cuda::detail::SplitTuning saved = cuda::detail::split_tuning();
  for (int kernel : {0, 1}) {  // key-parallel, dim-parallel
    cuda::detail::SplitTuning t = saved;
    t.keys_quant = t.keys_f16 = kernel == 0;
    cuda::detail::set_split_tuning(t);
    for (DType ty : kTypes) {
      for (int64_t ctx : {15, 16, 17, 63, 65, 1025}) check_case({ctx, 64, 2, 3, 32, ty, ty}, 1, rng);
      check_case({300, 128, 1, 1, 32, ty, ty}, 1, rng);
      check_case({301, 128, 1, 12, 96, ty, ty}, 1, rng);
      check_case({302, 256, 2, 16, 32, ty, ty}, 1, rng);
      check_case({303, 128, 2, 12, 64, ty, ty}, 3, rng);   // 36 rows: three row groups
      check_case({520, 64, 1, 16, 32, ty, ty}, 4, rng);    // 64 rows
      check_case({520, 64, 1, 16, 32, ty, ty}, 5, rng);    // 80 rows: the in-block fold
    }
    for (int64_t hd : {64, 128, 256}) {  // q8_0 K with q4_0 V and back, every head size
      check_case({333, hd, 2, 8, 32, DType::kQ8_0, DType::kQ4_0}, 1, rng);
      check_case({334, hd, 2, 8, 64, DType::kQ4_0, DType::kQ8_0}, 2, rng);
      check_case({335, hd, 1, 4, 32, DType::kQ4_0, DType::kQ8_0}, 30, rng);  // 120 rows: in-block fold
      for (const auto& [k, v] : kMixedF16) {  // f16 K or V: odd ends, verify, the in-block fold
        check_case({65, hd, 2, 3, 32, k, v}, 1, rng);
        check_case({336, hd, 1, 12, 64, k, v}, 3, rng);
        check_case({337, hd, 1, 4, 32, k, v}, 30, rng);
      }
    }
  }
  cuda::detail::set_split_tuning(saved);
  // Verify rows of GQA 16 (two n-tiles, several row groups) and prefill rows equal decode bits.
  for (DType ty : kTypes) {
    auto L = make_layer(1111, 1, 128, ty, ty, 64, rng);
    for (int64_t T : {4, 9}) {
      const int64_t n_heads = 16, pos0 = 1111 - T, row = n_heads * 128;
      const auto q = random_q(T, n_heads, 128, rng);
      const auto multi = gpu_attention(*L, q, T, pos0, n_heads);
      for (int64_t i = 0; i < T; ++i) {
        const std::vector<float> qi(q.begin() + i * row, q.begin() + (i + 1) * row);
        const auto one = gpu_attention(*L, qi, 1, pos0 + i, n_heads);
        EXPECT_EQ(std::memcmp(one.data(), multi.data() + i * row, size_t(row) * 4), 0)
            << type_name(ty) << " T " << T << ": row " << i << " differs from decode";
      }
    }
  }
}

// The key-parallel kernel's software-pipelined loop (compiled for 2 or for 3 blocks per SM) runs
// the plain loop's arithmetic in the same order: the same bits for decode and verify calls of every
// K/V type pair, head size and odd length (sub-tiles cut by the end, splits and runs of splits, GQA
// groups with padding rows).
TEST(AttentionCuda, PipelinedLoopEqualsPlainLoop) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 8);
  const cuda::detail::SplitTuning saved = cuda::detail::split_tuning();
  struct P {
    int64_t ctx, hd, n_kv, group, page, T;
    DType k, v;
  };
  const P cases[] = {{5000, 256, 2, 8, 256, 1, DType::kQ8_0, DType::kQ8_0},
                     {4099, 256, 2, 8, 64, 1, DType::kQ4_0, DType::kQ4_0},
                     {40001, 256, 2, 8, 256, 1, DType::kQ8_0, DType::kQ4_0},
                     {1025, 128, 1, 3, 32, 1, DType::kQ4_0, DType::kQ8_0},
                     {63, 64, 2, 4, 96, 2, DType::kQ8_0, DType::kQ8_0},  // verify, 8 rows: pipelined
                     {601, 256, 2, 8, 256, 3, DType::kQ8_0, DType::kQ8_0},  // verify, 24 rows: plain in both
                     {17, 256, 1, 1, 32, 1, DType::kQ4_0, DType::kQ4_0},
                     {70001, 256, 2, 8, 256, 1, DType::kQ8_0, DType::kQ8_0},  // runs of 3 splits
                     {3001, 256, 2, 8, 64, 1, DType::kQ4_0, DType::kQ8_0},
                     {2999, 256, 2, 8, 256, 1, DType::kF16, DType::kQ8_0},
                     {1029, 128, 2, 8, 32, 1, DType::kQ8_0, DType::kF16},
                     {70, 64, 1, 8, 32, 1, DType::kF16, DType::kQ4_0}};
  for (const P& p : cases) {
    auto L = make_layer(p.ctx, p.n_kv, p.hd, p.k, p.v, p.page, rng);
    const int64_t n_heads = p.n_kv * p.group;
    const auto q = random_q(p.T, n_heads, p.hd, rng);
    // plain; pipelined; for 3 blocks/SM where it fits; with a q8_0 V (head_dim 256) read as words;
    // pipelined and plain with the query loaded after the first copies (qkeys_early_query off; the
    // first four load it before them).
    const char* names[6] = {"plain", "pipelined", "pipelined for 3 blocks/SM", "pipelined, V as words",
                            "pipelined, query after the copies", "plain, query after the copies"};
    std::vector<float> out[6];
    for (int pipe = 0; pipe < 6; ++pipe) {
      cuda::detail::SplitTuning t = saved;
      t.keys_quant = true;
      t.qkeys_pipelined = pipe >= 1 && pipe != 5;
      t.qkeys_pipe3 = pipe == 2;
      t.qkeys_vwords = pipe == 3;
      t.qkeys_early_query = pipe < 4;
      cuda::detail::set_split_tuning(t);
      out[pipe] = gpu_attention(*L, q, p.T, p.ctx - p.T, n_heads);
    }
    cuda::detail::set_split_tuning(saved);
    for (int pipe = 1; pipe < 6; ++pipe) {
      EXPECT_FALSE(has_nonfinite(out[pipe]));
      EXPECT_EQ(std::memcmp(out[0].data(), out[pipe].data(), out[0].size() * 4), 0)
          << "ctx " << p.ctx << " hd " << p.hd << " K " << type_name(p.k) << " V " << type_name(p.v) << " T "
          << p.T << ": the plain loop and the " << names[pipe] << " loop differ";
    }
  }
}

// On a created stream the round-6 kernel's merge is launched with programmatic dependent launch
// (cuda::pdl_enabled()): it must wait for the split kernel, so the bits equal the plain launch's
// (the default stream), for decode and verify calls, repeated back to back.
TEST(AttentionCuda, PdlMergeEqualsPlainMerge) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 9);
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    auto L = make_layer(40001, 2, 256, t, t, 256, rng);
    for (int64_t T : {1, 3}) {
      const int64_t n_heads = 16, pos0 = 40001 - T, hd = 256;
      const auto q = random_q(T, n_heads, hd, rng);
      const auto plain = gpu_attention(*L, q, T, pos0, n_heads);  // default stream
      cudaStream_t stream;
      ck(cudaStreamCreate(&stream));
      auto dq = upload(q.data(), q.size() * 4);
      DevBuf dout(q.size() * 4);
      AttentionCall c;
      c.kv = L->dev_view;
      c.args = {dq->as<float>(), T, pos0, n_heads, 1.0f / 16.0f, dout.as<float>()};
      DevBuf ws(cuda::attention_workspace_bytes(&c, 1));
      ck(cudaMemset(ws.p, 0xff, ws.n));  // NaN partials: a merge that did not wait would show them
      cuda::attention(&c, 1, ws.p, stream);
      ck(cudaStreamSynchronize(stream));
      EXPECT_EQ(std::memcmp(plain.data(), download(dout.as<float>(), q.size()).data(), plain.size() * 4), 0)
          << type_name(t) << " T " << T << ": PDL merge differs from the plain launch (first call)";
      for (int rep = 0; rep < 3; ++rep) cuda::attention(&c, 1, ws.p, stream);  // back to back
      ck(cudaStreamSynchronize(stream));
      ck(cudaStreamDestroy(stream));
      const auto streamed = download(dout.as<float>(), q.size());
      EXPECT_EQ(std::memcmp(plain.data(), streamed.data(), plain.size() * 4), 0)
          << type_name(t) << " T " << T << ": PDL merge differs from the plain launch";
    }
  }
}

// Round 8's split tree of the key-parallel kernel (attention_qkeys.cuh): a partial every G 256-key
// sub-splits, G the smallest power of two leaving a row at most 128 partials. Host arithmetic: runs
// without a GPU too.
TEST(AttentionCuda, LongSplitGroupsFollowTheRowLength) {
  using cuda::detail::kQMaxParts;
  using cuda::detail::qkeys_parts;
  using cuda::detail::qkeys_split_group;
  const int cases[][2] = {{1, 1},         {256, 1},    {32768, 1}, {32769, 2},  {65536, 2},
                          {65537, 4},     {131072, 4}, {131073, 8}, {262144, 8}, {262145, 16}};
  for (const auto& c : cases) EXPECT_EQ(qkeys_split_group(c[0], kQMaxParts), c[1]) << c[0] << " keys";
  for (int n = 1; n < (1 << 21); n = n * 3 / 2 + 7) {
    const int g = qkeys_split_group(n, kQMaxParts), parts = qkeys_parts(n, kQMaxParts);
    EXPECT_LE(parts, kQMaxParts) << n;
    EXPECT_EQ(g & (g - 1), 0) << n << ": not a power of two";
    if (g > 1) EXPECT_GT((cuda::detail::qkeys_sub_splits(n) + g / 2 - 1) / (g / 2), kQMaxParts) << n << ": G not the smallest";
    EXPECT_EQ(qkeys_split_group(n, 0), 1);
    EXPECT_EQ(qkeys_parts(n, 0), cuda::detail::qkeys_sub_splits(n));
  }
}

// Rows whose positions straddle a change of split group (32768 | 32769 keys: G 1 -> 2; 65536 |
// 65537: G 2 -> 4) inside one block — a verify call's row group, a prefill call's in-block fold at
// GQA 1 — carry exactly the bits of decode at their positions, and stay within the bounds vs
// float64; round 7's fixed splits (long splits off) too. Then the long splits against the fixed
// ones at 70001 keys: different trees, both within the bound, and launch shapes change no bit.
TEST(AttentionCuda, LongSplitsStraddleAndEqualDecodeBits) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 10);
  const bool saved_long = cuda::detail::qkeys_long_splits();
  struct S {
    int64_t ctx, group, T, pos0;
    DType k, v;
  };
  const S cases[] = {{32800, 4, 4, 32766, DType::kQ8_0, DType::kQ8_0},    // 16 rows: n 32767..32770
                     {32900, 1, 100, 32718, DType::kQ4_0, DType::kQ8_0},  // prefill, 8 positions a block
                     {65600, 8, 3, 65535, DType::kQ8_0, DType::kQ4_0},    // 24 rows: n 65536..65538
                     {65600, 1, 70, 65500, DType::kF16, DType::kQ8_0},    // prefill, f16 K
                     {32800, 3, 2, 32767, DType::kQ4_0, DType::kF16}};    // 6 rows + 2 padding rows
  for (const S& c : cases) {
    auto L = make_layer(c.ctx, 1, 64, c.k, c.v, 256, rng);
    const int64_t n_heads = c.group, row = n_heads * 64;
    const auto q = random_q(c.T, n_heads, 64, rng);
    for (bool on : {true, false}) {
      cuda::detail::set_qkeys_long_splits(on);
      const auto multi = gpu_attention(*L, q, c.T, c.pos0, n_heads);
      EXPECT_FALSE(has_nonfinite(multi));
      // vs float64 on the same rows (the whole call).
      const auto ref = cpu_attention(*L, q, c.T, c.pos0, n_heads, true);
      EXPECT_LE(rel_error(multi, ref, L->v), gpu_bound(c.k, c.v))
          << "ctx " << c.ctx << " T " << c.T << " long splits " << on << " (vs float64)";
      std::vector<int64_t> rows_to_check;
      for (int64_t i = 0; i < c.T; ++i) {
        const int64_t n = c.pos0 + i + 1;  // keys the row sees
        if (c.T <= 4 || n == 32768 || n == 32769 || n == 65536 || n == 65537 || i == 0 || i == c.T - 1 ||
            i % 17 == 3)
          rows_to_check.push_back(i);
      }
      for (int64_t i : rows_to_check) {
        const std::vector<float> qi(q.begin() + i * row, q.begin() + (i + 1) * row);
        const auto one = gpu_attention(*L, qi, 1, c.pos0 + i, n_heads);
        EXPECT_EQ(std::memcmp(one.data(), multi.data() + i * row, size_t(row) * 4), 0)
            << "ctx " << c.ctx << " T " << c.T << " long splits " << on << ": row " << i << " (" << c.pos0 + i + 1
            << " keys) differs from decode";
      }
    }
  }
  // 70001 keys (G = 4: 69 partials, against 274 fixed splits), head_dim 256, GQA 8.
  auto L = make_layer(70001, 2, 256, DType::kQ8_0, DType::kQ8_0, 256, rng);
  const auto q = random_q(1, 16, 256, rng);
  const auto ref = cpu_attention(*L, q, 1, 70000, 16, true);
  cuda::detail::set_qkeys_long_splits(true);
  const auto lng = gpu_attention(*L, q, 1, 70000, 16);
  const cuda::detail::SplitTuning saved = cuda::detail::split_tuning();
  for (int bps : {1, 3}) {  // runs of 8 / 4 sub-splits instead of 4
    cuda::detail::SplitTuning t = saved;
    t.keys_blocks_per_sm = bps;
    t.qkeys_pdl_merge = bps == 3;
    cuda::detail::set_split_tuning(t);
    const auto reshaped = gpu_attention(*L, q, 1, 70000, 16);
    EXPECT_EQ(std::memcmp(lng.data(), reshaped.data(), lng.size() * 4), 0) << "long splits: launch shape " << bps;
  }
  cuda::detail::set_split_tuning(saved);
  cuda::detail::set_qkeys_long_splits(false);
  const auto fixed = gpu_attention(*L, q, 1, 70000, 16);
  cuda::detail::set_qkeys_long_splits(saved_long);
  EXPECT_LE(rel_error(lng, ref, L->v), gpu_bound(DType::kQ8_0, DType::kQ8_0)) << "long splits vs float64";
  EXPECT_LE(rel_error(fixed, ref, L->v), gpu_bound(DType::kQ8_0, DType::kQ8_0)) << "fixed splits vs float64";
  EXPECT_NE(std::memcmp(lng.data(), fixed.data(), lng.size() * 4), 0) << "the two trees gave the same bits: "
                                                                         "are the long splits in use?";
}

TEST(AttentionCuda, BadCallsThrow) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed() + 6);
  auto L = make_layer(40, 2, 64, DType::kF16, DType::kF16, 32, rng);
  AttentionCall c;
  c.kv = L->dev_view;
  DevBuf buf(4 * 16 * 64 * 4);
  c.args = {buf.as<float>(), 2, 39, 4, 0.125f, buf.as<float>()};  // reads past the cache
  EXPECT_THROW(cuda::attention(&c, 1, nullptr, nullptr), std::invalid_argument);
  c.args = {buf.as<float>(), 1, 10, 3, 0.125f, buf.as<float>()};  // 3 heads over 2 kv heads
  EXPECT_THROW(cuda::attention(&c, 1, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::kv_append(L->dev_view, 39, buf.as<float>(), buf.as<float>(), 2, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace weft
