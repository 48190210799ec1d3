// attention_quant (quantized KV tier): kernel error vs float64, quantization error per type,
// determinism across thread counts, every vector primitive set vs the scalar twin, end-to-end
// argmax agreement with the strict f16 path. (Speed: tools/attention_quant_bench, a command.)
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
// Kernel error (reference on the dequantized cache rows): float K is exact up to f32 rounding, and
// a quantized V adds its 16-bit p·v weights (pv_quant: at most 1/65534 of a tile's largest
// weight·scale each); quantized K also carries the query's q8 rounding.
double kernel_bound(DType k, DType v) {
  if (k != DType::kF16) return 2e-2;
  return v == DType::kF16 ? 1e-5 : 1e-4;
}
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

// The vector primitive sets this CPU can run (the dispatcher uses only the widest).
std::vector<std::pair<const char*, const AttnQuantOps*>> vector_sets() {
  std::vector<std::pair<const char*, const AttnQuantOps*>> sets;
  if (use_avx2()) sets.push_back({"avx2", &attn_quant_ops_avx2()});
  if (use_avx512_vnni()) sets.push_back({"avx512", &attn_quant_ops_avx512()});
  return sets;
}

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
  // The scalar twin: same float operations in the same order, so bit-identical to the dispatched
  // path; and every vector set this CPU can run (AVX2 here too, not only the widest), each alone.
  std::fill(other.begin(), other.end(), NAN);
  attention_quant_scalar(view, a, &pool2);
  EXPECT_EQ(0, std::memcmp(out.data(), other.data(), out.size() * 4)) << describe(p) << " scalar twin";
  for (const auto& [name, ops] : vector_sets()) {
    std::fill(other.begin(), other.end(), NAN);
    attention_quant_with(*ops, view, a, &pool2);
    EXPECT_EQ(0, std::memcmp(out.data(), other.data(), out.size() * 4)) << describe(p) << " " << name << " set";
  }

  const double vmax = std::fabs(*std::max_element(v.begin(), v.end(), [](float x, float y) {
    return std::fabs(x) < std::fabs(y);
  }));
  Errors e;
  e.kernel = max_err(out, attention_f64(p, q, decoded(p.k_type, k, hd), decoded(p.v_type, v, hd), a.scale)) / vmax;
  e.total = max_err(out, attention_f64(p, q, k, v, a.scale)) / vmax;
  EXPECT_LT(e.kernel, kernel_bound(p.k_type, p.v_type)) << describe(p);
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
                  dtype_name(kt), dtype_name(vt), worst.kernel, kernel_bound(kt, vt), worst.total, total_bound(kt, vt));
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

// attn_exp against float64 exp over the softmax's range, and its floor.
TEST(AttentionQuantPrimitives, ExpMatchesFloat64) {
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f * float(i) / 200000.0f;
    const double want = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(attn_exp(x)) - want) / want);
  }
  std::printf("[ attn_exp ] max relative error on [-87, 0]: %.3g\n", worst);
  EXPECT_LT(worst, 5e-7);  // ~4 ulp
  EXPECT_EQ(attn_exp(0.0f), 1.0f);
  EXPECT_EQ(attn_exp(-1e30f), attn_exp(-87.0f));
  EXPECT_EQ(attn_exp(-INFINITY), attn_exp(-87.0f));
  EXPECT_EQ(attn_exp(NAN), attn_exp(-87.0f));
  EXPECT_GT(attn_exp(-87.0f), 0.0f);
  EXPECT_LT(attn_exp(-87.0f), 2e-38f);
}

// exp_sum and scores of every vector set against the scalar twin, bit for bit, on inputs the
// end-to-end checks rarely reach: lengths around the 8-lane groups, extreme and non-finite
// scores, the extreme codes of q8_0 (-128 included, which the encoder never writes) and q4_0,
// queries of +-127, group sizes 1..16 (tiles of 8 and a partial one).
TEST(AttentionQuantPrimitives, VectorSetsEqualScalarTwin) {
  std::mt19937_64 rng(test_seed() + 2);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  const AttnQuantOps& scalar = attn_quant_ops_scalar();
  if (vector_sets().empty()) GTEST_SKIP() << "no vector set on this CPU";
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 40, 255, 256}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    x[size_t(rng() % uint64_t(n))] = -1e30f;
    if (n > 2) x[1] = -INFINITY;
    const float m = *std::max_element(x.begin(), x.end());
    std::vector<float> want = x;
    const float want_sum = scalar.exp_sum(want.data(), n, m);
    for (const auto& [name, ops] : vector_sets()) {
      std::vector<float> got = x;
      const float sum = ops->exp_sum(got.data(), n, m);
      EXPECT_EQ(0, std::memcmp(&sum, &want_sum, 4)) << name << " n " << n;
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), size_t(n) * 4)) << name << " n " << n;
    }
  }
  for (DType kt : {DType::kQ8_0, DType::kQ4_0})
    for (int64_t group : {1, 3, 8, 9, 16}) {
      const int64_t hd = 128, nb = hd / 32, n_keys = 37;
      KvCache cache(KvCacheSpec{1, 1, hd, kt, DType::kQ8_0, 16});
      std::vector<float> k(size_t(n_keys * hd)), v(k.size());
      for (auto& e : k) e = nd(rng);
      for (auto& e : v) e = nd(rng);
      cache.append(0, k.data(), v.data(), n_keys);
      KvLayerView view = cache.view(0);
      // Extreme codes written straight into some rows: all -128 / all 127 (q8_0), 0 / 15 (q4_0).
      for (int64_t r : {int64_t(3), int64_t(20)}) {
        auto* row = const_cast<uint8_t*>(view.k_row(0, r));
        for (int64_t b = 0; b < nb; ++b) {
          if (kt == DType::kQ8_0) {
            auto* blk = reinterpret_cast<BlockQ8_0*>(row) + b;
            std::memset(blk->qs, r == 3 ? 0x80 : 0x7f, 32);
          } else {
            auto* blk = reinterpret_cast<BlockQ4_0*>(row) + b;
            std::memset(blk->qs, r == 3 ? 0x00 : 0xff, 16);
          }
        }
      }
      std::vector<AttnQBlock> qb(size_t(group * nb));
      for (auto& b : qb) {
        b.d = std::fabs(nd(rng)) / 127.0f;
        b.qsum = 0;
        for (auto& c : b.qs) {
          const uint64_t u = rng() % 8;
          c = int8_t(u == 0 ? 127 : u == 1 ? -127 : int(rng() % 255) - 127);
          b.qsum += c;
        }
      }
      std::vector<AttnQTile> tiles(size_t((group + 7) / 8 * nb));
      for (int64_t t = 0; t * 8 < group; ++t)
        for (int64_t b = 0; b < nb; ++b) {
          AttnQTile& tile = tiles[size_t(t * nb + b)];
          std::memset(&tile, 0, sizeof tile);
          for (int64_t h = 0; h < 8 && t * 8 + h < group; ++h) {
            const AttnQBlock& q = qb[size_t((t * 8 + h) * nb + b)];
            std::memcpy(tile.qs[h], q.qs, 32);
            for (int c = 0; c < 8; ++c) std::memcpy(tile.qt[c][h], q.qs + 4 * c, 4);
            tile.d[h] = q.d;
            tile.bias8[h] = -8 * q.qsum;
            tile.bias128[h] = -128 * q.qsum;
          }
        }
      const AttnGroupQuery q{nullptr, qb.data(), tiles.data(), group, nb};
      std::vector<float> want(size_t(group * n_keys)), got(want.size());
      scalar.scores(view, 0, 0, n_keys, q, 0.0625f, want.data());
      // The integer dots are exact: check one score against a float64 recomputation too.
      double ref = 0;
      {
        std::vector<float> row(static_cast<size_t>(hd));
        decode_kv_row(kt, view.k_row(0, 20), row.data(), hd);
        for (int64_t b = 0; b < nb; ++b) {
          double dot = 0;
          for (int e = 0; e < 32; ++e) dot += double(row[size_t(b * 32 + e)]) * double(qb[size_t(b)].qs[e]) * qb[size_t(b)].d;
          ref += dot;
        }
        ref *= 0.0625;
      }
      EXPECT_NEAR(want[20], ref, 1e-4 * std::max(1.0, std::fabs(ref))) << dtype_name(kt);
      for (const auto& [name, ops] : vector_sets()) {
        std::fill(got.begin(), got.end(), NAN);
        ops->scores(view, 0, 0, n_keys, q, 0.0625f, got.data());
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
            << name << " " << dtype_name(kt) << " group " << group;
      }
    }
}

// pv_quant (quantized V in integers): every vector set gives the scalar twin's bits, and the twin
// stays within the rounding its contract allows of float64 on the decoded rows. Rows of extreme
// codes (q8_0 -128 / 127, q4_0 0 / 15) and an all-zero row; weights of exactly 1, 0, below the
// floor, and a head with no weight at all; key counts around the 64-key tile and odd ones; groups
// of 1 to 16 (tiles of 8 and a partial one); acc starting non-zero (the contract adds to it).
TEST(AttentionQuantPrimitives, PvQuantEqualsScalarTwinAndFloat64) {
  std::mt19937_64 rng(test_seed() + 3);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  const AttnQuantOps& scalar = attn_quant_ops_scalar();
  for (DType vt : {DType::kQ8_0, DType::kQ4_0})
    for (int64_t hd : {32, 128, 256})
      for (int64_t group : {1, 3, 8, 9, 16})
        for (int64_t n : {1, 2, 31, 63, 64, 65, 130}) {
          const int64_t k0 = 5, ctx = k0 + n, nb = hd / 32;
          KvCache cache(KvCacheSpec{1, 1, hd, DType::kQ8_0, vt, 16});
          std::vector<float> k(size_t(ctx * hd)), v(k.size());
          for (auto& e : k) e = nd(rng);
          for (auto& e : v) e = nd(rng);
          for (int64_t e = 0; e < hd && ctx > 7; ++e) v[size_t(7 * hd + e)] = 0.0f;  // an all-zero row
          cache.append(0, k.data(), v.data(), ctx);
          KvLayerView view = cache.view(0);
          for (int64_t r : {int64_t(k0), int64_t(k0 + n / 2)}) {
            auto* row = const_cast<uint8_t*>(view.v_row(0, r));
            for (int64_t b = 0; b < nb; ++b) {
              if (vt == DType::kQ8_0) std::memset(reinterpret_cast<BlockQ8_0*>(row)[b].qs, r == k0 ? 0x80 : 0x7f, 32);
              else std::memset(reinterpret_cast<BlockQ4_0*>(row)[b].qs, r == k0 ? 0x00 : 0xff, 16);
            }
          }
          const int64_t ps = n + 3;  // p rows of another stride than n
          std::vector<float> p(size_t(group * ps));
          for (int64_t i = 0; i < group; ++i)
            for (int64_t j = 0; j < n; ++j) {
              const uint64_t u = rng() % 10;
              float& x = p[size_t(i * ps + j)];
              x = u == 0 ? 1.0f : u == 1 ? 0.0f : u == 2 ? 1e-17f : u == 3 ? ud(rng) * 1e-4f : ud(rng);
              if (i == 1) x = 0.0f;    // a head with no weight
              if (i == 2) x = 1e-17f;  // a head under the floor (its tile-blocks add nothing)
            }
          std::vector<float> acc0(size_t(group * hd));
          for (auto& e : acc0) e = nd(rng);
          std::vector<float> want = acc0;
          scalar.pv_quant(view, 0, k0, n, p.data(), ps, group, want.data());
          for (const auto& [name, ops] : vector_sets()) {
            std::vector<float> got = acc0;
            ops->pv_quant(view, 0, k0, n, p.data(), ps, group, got.data());
            EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
                << name << " " << dtype_name(vt) << " hd " << hd << " group " << group << " n " << n;
          }
          // float64 on the decoded rows. Each 16-bit weight rounds by at most half a unit of
          // m / 32767 (m: the tile's largest p times the block's largest |d|), and a tile-block with
          // either maximum under the floor is dropped:
          // per element at most 0.5 · (m / 32767) · Σ_j |c_j| per tile, plus the f32 rounding.
          std::vector<std::vector<float>> rows(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(hd)));
          for (int64_t j = 0; j < n; ++j) decode_kv_row(vt, view.v_row(0, k0 + j), rows[size_t(j)].data(), hd);
          auto scale_of = [&](int64_t j, int64_t b) {
            const uint8_t* row = view.v_row(0, k0 + j);
            return double(f16_to_f32(vt == DType::kQ8_0 ? reinterpret_cast<const BlockQ8_0*>(row)[b].d
                                                        : reinterpret_cast<const BlockQ4_0*>(row)[b].d));
          };
          for (int64_t i = 0; i < group; ++i)
            for (int64_t e = 0; e < hd; ++e) {
              const int64_t b = e / 32;
              double ref = acc0[size_t(i * hd + e)], bound = 1e-6 * std::fabs(ref);
              for (int64_t j0 = 0; j0 < n; j0 += kAttnPvKeys) {
                double pmax = 0, dmax = 0, codes = 0;
                for (int64_t j = j0; j < std::min(n, j0 + kAttnPvKeys); ++j) {
                  const double pj = p[size_t(i * ps + j)], d = scale_of(j, b), x = rows[size_t(j)][size_t(e)];
                  ref += pj * x;
                  pmax = std::max(pmax, pj);
                  dmax = std::max(dmax, std::fabs(d));
                  codes += d != 0 ? std::fabs(x / d) : 0.0;
                  bound += 1e-6 * std::fabs(pj * x);
                }
                const double m = pmax * dmax;  // the contract's bound on |p·d| over the tile-block
                const bool kept = pmax >= double(kAttnPvFloor) && dmax >= double(kAttnPvFloor);
                bound += kept ? 0.5 * m / 32767.0 * codes : m * codes;
              }
              ASSERT_LE(std::fabs(double(want[size_t(i * hd + e)]) - ref), bound)
                  << dtype_name(vt) << " hd " << hd << " group " << group << " n " << n << " head " << i << " dim " << e;
            }
        }
}

}  // namespace
}  // namespace weft
