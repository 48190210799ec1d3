// attention_quant (quantized KV tier): kernel error vs float64, quantization error per type,
// determinism across thread counts, AVX2 vs scalar twin, end-to-end argmax agreement with the
// strict f16 path, and a disabled-by-default decode throughput comparison with attention_f16.
#include "kernels/cpu/attention_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "cache/kv_cache.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "io/safetensors.h"
#include "kernels/cpu/kv_quant.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

// Error bounds, as max |out − ref| / max |v| over all outputs (see attention_quant.h).
// Kernel error (reference on the dequantized cache rows): float K is exact up to f32 rounding;
// quantized K also carries the query's q8 rounding.
double kernel_bound(DType k) { return k == DType::kF16 ? 1e-5 : 2e-2; }
// Total error vs float64 on the original (unquantized) values, per K and V type.
double total_bound(DType k, DType v) {
  auto kb = [](DType t) { return t == DType::kQ4_0 ? 1.5e-1 : t == DType::kQ8_0 ? 2.5e-2 : 2e-3; };
  auto vb = [](DType t) { return t == DType::kQ4_0 ? 1.5e-1 : t == DType::kQ8_0 ? 1.5e-2 : 2e-3; };
  return kb(k) + vb(v);
}

uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* e = std::getenv("WEFT_TEST_SEED");
    const uint64_t s = e ? std::strtoull(e, nullptr, 10) : std::random_device{}();
    std::printf("[ attention_quant_test ] seed %llu (rerun with WEFT_TEST_SEED=%llu)\n", (unsigned long long)s,
                (unsigned long long)s);
    return s;
  }();
  return seed;
}

struct Problem {
  int64_t ctx, hd, n_kv, group, T, page_tokens;
  DType k_type, v_type;
};

std::string describe(const Problem& p) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "K %s V %s ctx %lld hd %lld n_kv %lld group %lld T %lld page %lld",
                dtype_name(p.k_type), dtype_name(p.v_type), (long long)p.ctx, (long long)p.hd, (long long)p.n_kv,
                (long long)p.group, (long long)p.T, (long long)p.page_tokens);
  return buf;
}

// float64 attention of query rows q [T, n_heads, hd] over keys/values [ctx, n_kv, hd].
std::vector<double> attention_f64(const Problem& p, const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, double scale) {
  const int64_t nh = p.n_kv * p.group, hd = p.hd, pos0 = p.ctx - p.T;
  std::vector<double> out(size_t(p.T * nh * hd), 0.0), s(size_t(p.ctx));
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / p.group, n = pos0 + t + 1;
      const float* qh = q.data() + (t * nh + h) * hd;
      double m = -INFINITY, l = 0;
      for (int64_t j = 0; j < n; ++j) {
        double d = 0;
        for (int64_t e = 0; e < hd; ++e) d += double(qh[e]) * k[size_t((j * p.n_kv + g) * hd + e)];
        s[size_t(j)] = d * scale;
        m = std::max(m, s[size_t(j)]);
      }
      double* o = out.data() + (t * nh + h) * hd;
      for (int64_t j = 0; j < n; ++j) {
        const double w = std::exp(s[size_t(j)] - m);
        l += w;
        for (int64_t e = 0; e < hd; ++e) o[e] += w * v[size_t((j * p.n_kv + g) * hd + e)];
      }
      for (int64_t e = 0; e < hd; ++e) o[e] /= l;
    }
  return out;
}

double max_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(double(got[i]) - ref[i]));
  return e;
}

// Rows as the cache holds them, decoded back to f32: [ctx, n_kv, hd].
std::vector<float> decoded(DType type, const std::vector<float>& x, int64_t hd) {
  std::vector<float> out(x.size());
  std::vector<uint8_t> row(kv_row_bytes(type, hd));
  for (size_t r = 0; r < x.size() / size_t(hd); ++r) {
    encode_kv_row(type, x.data() + r * size_t(hd), row.data(), hd);
    decode_kv_row(type, row.data(), out.data() + r * size_t(hd), hd);
  }
  return out;
}

struct Errors {
  double kernel = 0, total = 0;
};

// Runs one problem through every pool size and both paths; returns errors normalised by max|v|.
Errors check_problem(const Problem& p, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t nh = p.n_kv * p.group, hd = p.hd;
  std::vector<float> k(size_t(p.ctx * p.n_kv * hd)), v(k.size()), q(size_t(p.T * nh * hd));
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = nd(rng);

  KvCacheSpec spec;
  spec.n_layers = 1;
  spec.n_kv_heads = p.n_kv;
  spec.head_dim = hd;
  spec.k_type = p.k_type;
  spec.v_type = p.v_type;
  spec.page_tokens = p.page_tokens;
  KvCache cache(spec);
  // Appended in uneven pieces, as prefill batches and decode steps would.
  for (int64_t t0 = 0; t0 < p.ctx;) {
    const int64_t n = std::min<int64_t>(p.ctx - t0, 1 + (t0 % 97));
    cache.append(0, k.data() + t0 * p.n_kv * hd, v.data() + t0 * p.n_kv * hd, n);
    t0 += n;
  }
  const KvLayerView view = cache.view(0);
  EXPECT_TRUE(attention_quant_supports(view)) << describe(p);

  AttentionArgs a;
  a.q = q.data();
  a.T = p.T;
  a.pos0 = p.ctx - p.T;
  a.n_heads = nh;
  a.scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> out(q.size(), NAN), other(q.size());
  a.out = out.data();
  ThreadPool pool2(2);
  attention_quant(view, a, &pool2);

  // Thread-count independence: no pool, 1, 2 (again) and 3 threads give the same bits.
  a.out = other.data();
  for (int threads : {0, 1, 2, 3}) {
    std::fill(other.begin(), other.end(), NAN);
    if (threads == 0) {
      attention_quant(view, a, nullptr);
    } else {
      ThreadPool pool(threads);
      attention_quant(view, a, &pool);
    }
    EXPECT_EQ(0, std::memcmp(out.data(), other.data(), out.size() * 4)) << describe(p) << " threads " << threads;
  }
  // The scalar twin: same lanes, same order, so bit-identical to the AVX2 path.
  std::fill(other.begin(), other.end(), NAN);
  attention_quant_scalar(view, a, &pool2);
  EXPECT_EQ(0, std::memcmp(out.data(), other.data(), out.size() * 4)) << describe(p) << " scalar twin";

  const double vmax = std::fabs(*std::max_element(v.begin(), v.end(), [](float x, float y) {
    return std::fabs(x) < std::fabs(y);
  }));
  Errors e;
  e.kernel = max_err(out, attention_f64(p, q, decoded(p.k_type, k, hd), decoded(p.v_type, v, hd), a.scale)) / vmax;
  e.total = max_err(out, attention_f64(p, q, k, v, a.scale)) / vmax;
  EXPECT_LT(e.kernel, kernel_bound(p.k_type)) << describe(p);
  EXPECT_LT(e.total, total_bound(p.k_type, p.v_type)) << describe(p);
  return e;
}

const DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kF16};

TEST(AttentionQuant, SupportsOnlyQuantizedCombinations) {
  KvLayerView v;
  v.head_dim = 64;
  for (DType k : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0})
    for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
      v.k_type = k;
      v.v_type = t;
      const bool want = k != DType::kF32 && t != DType::kF32 && !(k == DType::kF16 && t == DType::kF16);
      EXPECT_EQ(attention_quant_supports(v), want) << dtype_name(k) << "/" << dtype_name(t);
    }
  v.k_type = DType::kQ8_0;
  v.head_dim = 48;
  EXPECT_FALSE(attention_quant_supports(v));
}

// Every K/V combination, contexts across page boundaries (pages of 256 and of 16), head_dim
// 64/128/256, GQA 1/4/8, decode and prefill with pos0 > 0.
TEST(AttentionQuant, MatchesFloat64AndIsDeterministic) {
  std::mt19937_64 rng(test_seed());
  const int64_t ctxs[] = {1, 2, 31, 255, 256, 257, 511, 1000, 1300};
  const int64_t hds[] = {64, 128, 256}, groups[] = {1, 4, 8};
  int combo = 0;
  for (DType kt : kTypes)
    for (DType vt : kTypes) {
      if (kt == DType::kF16 && vt == DType::kF16) continue;
      Errors worst;
      int i = combo++;
      for (int64_t ctx : ctxs)
        for (int64_t T : {int64_t(1), int64_t(5)}) {
          if (T > ctx) continue;
          ++i;
          Problem p{ctx, hds[i % 3], 2, groups[(i / 3) % 3], T, (i % 2) ? 16 : 256, kt, vt};
          // Keep the float64 reference affordable: the largest head/group sizes at moderate depth.
          if (ctx > 600 && p.hd == 256 && p.group == 8) p.group = 4;
          Errors e = check_problem(p, rng);
          worst.kernel = std::max(worst.kernel, e.kernel);
          worst.total = std::max(worst.total, e.total);
        }
      std::printf("[ K %-4s V %-4s ] kernel err %.3g (bound %.0e), total err vs unquantized %.3g (bound %.2g)\n",
                  dtype_name(kt), dtype_name(vt), worst.kernel, kernel_bound(kt), worst.total, total_bound(kt, vt));
    }
}

// head_dim 256, GQA 8 (Qwen3.5-35B-A3B's attention geometry) at a depth spanning many chunks.
TEST(AttentionQuant, Qwen35GeometryDeep) {
  std::mt19937_64 rng(test_seed() + 1);
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    Errors e = check_problem({2100, 256, 2, 8, 1, 256, t, t}, rng);
    std::printf("[ K/V %s hd 256 GQA 8 ctx 2100 ] kernel err %.3g, total err %.3g\n", dtype_name(t), e.kernel, e.total);
  }
}

// ---- End to end: --kv q8_0 vs the strict f16 path, argmax of every teacher-forced position.

std::vector<int32_t> prompt_ids(const std::string& fixture_dir) {
  auto f = SafetensorsFile::open(fixture_dir + "/reference.safetensors");
  EXPECT_TRUE(f.ok()) << f.status().message();
  if (!f.ok()) return {};
  const TensorView& t = *f->find("prompt_ids");
  std::vector<int32_t> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[size_t(i)] = t.dtype == DType::kI64 ? int32_t(t.as<int64_t>()[i]) : t.as<int32_t>()[i];
  return v;
}

std::string model_dir_of(const std::string& fixture_dir) {
  std::ifstream in(fixture_dir + "/model_dir.txt");
  std::string rel;
  if (in >> rel) return test::source_dir() + "/" + rel;
  return fixture_dir;
}

std::vector<float> all_logits(const Model& model, const std::vector<int32_t>& ids, DType kv) {
  SessionOptions so;
  so.kv.k_type = so.kv.v_type = kv;
  so.threads = 2;
  so.batch = 16;
  Session s(model, so);
  std::vector<float> logits(ids.size() * size_t(model.config().vocab_size));
  EXPECT_TRUE(s.feed(ids.data(), int64_t(ids.size()), logits.data(), nullptr).ok());
  return logits;
}

struct Agreement {
  int64_t agree = 0;
  double frac = 0;
  // Over the positions where the argmax differs: the widest f16 logit gap between the f16
  // choice and the quantized one, in units of that f16 row's standard deviation. Small means
  // the flip was between near-ties.
  double max_flip_margin = 0;
};

Agreement agreement(const std::vector<float>& ref, const std::vector<float>& got, int64_t T, int64_t V) {
  Agreement a;
  for (int64_t t = 0; t < T; ++t) {
    const float* r = ref.data() + t * V;
    const int64_t want = argmax(r, V), have = argmax(got.data() + t * V, V);
    if (want == have) {
      ++a.agree;
      continue;
    }
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < V; ++i) mean += r[i];
    mean /= double(V);
    for (int64_t i = 0; i < V; ++i) sq += (r[i] - mean) * (r[i] - mean);
    const double sd = std::sqrt(sq / double(V));
    a.max_flip_margin = std::max(a.max_flip_margin, double(r[want] - r[have]) / (sd > 0 ? sd : 1));
  }
  a.frac = double(a.agree) / double(T);
  return a;
}

TEST(AttentionQuantEndToEnd, ArgmaxAgreesWithF16OnFixtures) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(test::source_dir() + "/tests/data/fixtures")) {
    if (!fs::exists(entry.path() / "reference.safetensors")) continue;
    const std::string name = entry.path().filename().string();
    auto model = Model::load(model_dir_of(entry.path().string()));
    ASSERT_TRUE(model.ok()) << name << ": " << model.status().message();
    const ModelConfig& c = model.value()->config();
    if (c.head_dim % 32 != 0) {
      std::printf("[ %s ] skipped: head_dim %lld is not a multiple of 32 (q8_0 blocks)\n", name.c_str(),
                  (long long)c.head_dim);
      continue;
    }
    const std::vector<int32_t> ids = prompt_ids(entry.path().string());
    const int64_t V = c.vocab_size, T = int64_t(ids.size());
    const std::vector<float> ref = all_logits(*model.value(), ids, DType::kF16);
    for (DType kv : {DType::kQ8_0, DType::kQ4_0}) {
      const std::vector<float> got = all_logits(*model.value(), ids, kv);
      const Agreement a = agreement(ref, got, T, V);
      std::printf("[ %s kv=%s ] argmax agreement with f16: %lld / %lld (%.1f%%); widest f16 margin flipped %.3f std\n",
                  name.c_str(), dtype_name(kv), (long long)a.agree, (long long)T, 100 * a.frac, a.max_flip_margin);
      if (kv == DType::kQ8_0) {
        EXPECT_GE(a.frac, 0.99) << name;
      } else {
        // q4_0 is lossy, so its bounds come from measurement (this dev VM, 2026-11; the kernels
        // are deterministic, so the values repeat exactly). Where q4_0 attention is a minority of
        // the layers (the hybrids: GDN layers carry no KV), agreement measured 97.5-100% (the
        // trained weft-tiny-hybrid: 199/200) and every flip was between near-ties, f16 margin
        // <= 0.027 row std: bounds 95% and 0.1 std. The all-full-attention random-weight
        // qwen3_tied_f16 (head_dim 256, q4_0 error in every layer, near-flat logits) measured
        // 29/40 = 72.5% with flips up to 0.635 std: bounds 60% and 1.0 std.
        const bool hybrid = c.num_linear_attention_layers() > 0;
        EXPECT_GE(a.frac, hybrid ? 0.95 : 0.6) << name;
        EXPECT_LT(a.max_flip_margin, hybrid ? 0.1 : 1.0) << name << ": q4_0 changed a clear f16 argmax";
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

// ---- Decode throughput: attention_f16 vs attention_quant, head_dim 256, GQA 8, 2 kv heads.
// Run: ./attention_quant_test --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'

double time_ms(const std::function<void()>& fn, int reps) {
  fn();  // warm
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

TEST(AttentionQuantBench, DISABLED_Throughput) {
  const int64_t hd = 256, n_kv = 2, group = 8, nh = n_kv * group;
  const int threads = 2;
  ThreadPool pool(threads);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(size_t(nh * hd)), out(q.size());
  for (auto& x : q) x = nd(rng);
  std::printf("decode T=1, head_dim %lld, %lld kv heads x GQA %lld, %d threads, best of 7 (%s)\n", (long long)hd,
              (long long)n_kv, (long long)group, threads, use_avx2() ? "AVX2" : "scalar");
  // The three cache types are timed interleaved (one call each per round, best of 7 rounds), so
  // load from other processes on the shared VM hits them alike.
  for (int64_t ctx : {4096, 16384, 32768}) {
    std::vector<float> k(size_t(ctx * n_kv * hd)), v(k.size());
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    const DType types[3] = {DType::kF16, DType::kQ8_0, DType::kQ4_0};
    std::vector<std::unique_ptr<KvCache>> caches;
    double best[3] = {1e30, 1e30, 1e30};
    for (DType t : types) {
      caches.push_back(std::make_unique<KvCache>(KvCacheSpec{1, n_kv, hd, t, t, 256}));
      caches.back()->append(0, k.data(), v.data(), ctx);
    }
    for (int round = 0; round < 8; ++round)
      for (int ti = 0; ti < 3; ++ti) {
        const KvLayerView view = caches[size_t(ti)]->view(0);
        AttentionArgs a{q.data(), 1, ctx - 1, nh, 1.0f / 16.0f, out.data()};
        auto t0 = std::chrono::steady_clock::now();
        if (ti == 0) attention_f16(view, a, &pool);
        else attention_quant(view, a, &pool);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (round > 0) best[ti] = std::min(best[ti], ms);  // round 0 warms caches and scratch
      }
    for (int ti = 0; ti < 3; ++ti) {
      const KvLayerView view = caches[size_t(ti)]->view(0);
      const double bytes = double(ctx) * double(n_kv) * double(view.k_row_bytes + view.v_row_bytes);
      std::printf("  ctx %6lld  %-5s %8.3f ms  %6.1f MB  %5.2f GB/s  speedup vs f16 %.2fx\n", (long long)ctx,
                  dtype_name(types[ti]), best[ti], bytes / 1e6, bytes / best[ti] / 1e6, best[0] / best[ti]);
    }
  }
  // K scoring alone, one thread, 4096 q8_0 rows x 8 heads: integer dot vs dequantize + FMA.
  const int64_t rows = 4096, nb = hd / 32;
  std::vector<float> kr(static_cast<size_t>(rows * hd)), row(static_cast<size_t>(hd)), s(static_cast<size_t>(group));
  for (auto& x : kr) x = nd(rng);
  std::vector<BlockQ8_0> kq(size_t(rows * nb));
  for (int64_t r = 0; r < rows; ++r) quantize_row_q8_0(kr.data() + r * hd, kq.data() + r * nb, hd);
  std::vector<AttnQBlock> qb(size_t(group * nb));
  for (int64_t i = 0; i < group * nb; ++i) {
    AttnQBlock& b = qb[size_t(i)];
    b.d = 0.01f;
    for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(int(rng() % 255) - 127);
    for (int l = 0; l < 8; ++l) b.lane_sum8[l] = 0;
  }
  if (use_avx2()) {
    const AttnQuantOps& o = attn_quant_ops_avx2();
    float sink = 0;
    const double int_ms = time_ms([&] {
      for (int64_t r = 0; r < rows; ++r) {
        o.scores_q8(reinterpret_cast<const uint8_t*>(kq.data() + r * nb), qb.data(), group, nb, s.data());
        sink += s[0];
      }
    }, 9);
    const double fma_ms = time_ms([&] {
      for (int64_t r = 0; r < rows; ++r) {
        o.load_row(DType::kQ8_0, reinterpret_cast<const uint8_t*>(kq.data() + r * nb), row.data(), hd);
        for (int64_t i = 0; i < group; ++i) s[size_t(i)] = o.dot(q.data() + i * hd, row.data(), hd);
        sink += s[0];
      }
    }, 9);
    std::printf("K scores, %lld q8_0 rows x %lld heads: integer dot %.3f ms, dequantize+FMA %.3f ms (%.2fx) [%g]\n",
                (long long)rows, (long long)group, int_ms, fma_ms, fma_ms / int_ms, double(sink != 0));
  }
}

}  // namespace
}  // namespace weft
