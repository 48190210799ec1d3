// Hadamard rotation of the quantized KV tier (--kv-rotate): the transform itself, and the engine
// end to end (rotated q8_0 stays close to f16; the option never touches f16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/session.h"
#include "io/safetensors.h"
#include "kernels/cpu/hadamard.h"
#include "lab/fidelity.h"
#include "model/model.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

std::vector<float> random_vec(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

TEST(Hadamard, MatchesSylvesterMatrix) {
  // H[i][j] = (-1)^popcount(i & j) / sqrt(n): column j is fwht of the unit vector e_j.
  for (int64_t n : {1, 2, 4, 8, 16, 32, 64}) {
    for (int64_t j = 0; j < n; ++j) {
      std::vector<float> e(static_cast<size_t>(n), 0.0f);
      e[size_t(j)] = 1.0f;
      fwht(e.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = (__builtin_popcountll(uint64_t(i & j)) % 2 ? -1.0 : 1.0) / std::sqrt(double(n));
        EXPECT_NEAR(e[size_t(i)], want, 1e-7) << "n " << n << " i " << i << " j " << j;
      }
    }
  }
}

TEST(Hadamard, IsItsOwnInverseAndPreservesDots) {
  std::mt19937_64 rng(3);
  for (int64_t n = 32; n <= 512; n *= 2) {
    for (int rep = 0; rep < 20; ++rep) {
      const std::vector<float> a = random_vec(rng, n), b = random_vec(rng, n);
      std::vector<float> ha = a, hb = b;
      fwht(ha.data(), n);
      fwht(hb.data(), n);
      double dot = 0, hdot = 0, norm = 0, hnorm = 0;
      for (int64_t i = 0; i < n; ++i) {
        dot += double(a[size_t(i)]) * b[size_t(i)];
        hdot += double(ha[size_t(i)]) * hb[size_t(i)];
        norm += double(a[size_t(i)]) * a[size_t(i)];
        hnorm += double(ha[size_t(i)]) * ha[size_t(i)];
      }
      // Float butterflies: log2(n) roundings per value, relative ~1e-7 each.
      EXPECT_NEAR(hdot, dot, 1e-5 * std::sqrt(norm) * std::sqrt(double(n))) << "n " << n;
      EXPECT_NEAR(hnorm, norm, 1e-5 * norm) << "n " << n;
      std::vector<float> back = ha;
      fwht(back.data(), n);  // H·H = I
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(back[size_t(i)], a[size_t(i)], 1e-5f) << "n " << n;
    }
  }
}

TEST(Hadamard, SpreadsAnOutlierChannel) {
  // The reason for the option: one large channel makes the block's q8_0/q4_0 scale large for all
  // 32 values; after H it is spread as ±x/sqrt(n) over every value.
  const int64_t n = 128;
  std::vector<float> x(size_t(n), 0.0f);
  x[5] = 100.0f;
  fwht(x.data(), n);
  for (float v : x) EXPECT_NEAR(std::fabs(v), 100.0f / std::sqrt(128.0f), 1e-4f);
}

TEST(Hadamard, RowsAndSizeCheck) {
  EXPECT_TRUE(fwht_size_ok(1));
  EXPECT_TRUE(fwht_size_ok(256));
  EXPECT_FALSE(fwht_size_ok(0));
  EXPECT_FALSE(fwht_size_ok(96));
  std::mt19937_64 rng(5);
  std::vector<float> x = random_vec(rng, 3 * 64), y = x;
  fwht_rows(x.data(), 3, 64);
  for (int r = 0; r < 3; ++r) fwht(y.data() + r * 64, 64);
  EXPECT_EQ(x, y);
}

TEST(Hadamard, FidelityArmSyntax) {
  auto a = lab::parse_fidelity_arm("q4_0+rot");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->name, "q4_0+rot");
  EXPECT_EQ(a->kv.k_type, DType::kQ4_0);
  EXPECT_EQ(a->kv.v_type, DType::kQ4_0);
  EXPECT_TRUE(a->kv.rotate);
  auto b = lab::parse_fidelity_arm("q8_0/f16+rot");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_TRUE(b->kv.rotates_k());
  EXPECT_FALSE(b->kv.rotates_v());
  auto plain = lab::parse_fidelity_arm("q4_0");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->kv.rotate);
  EXPECT_FALSE(lab::parse_fidelity_arm("f16+rot").ok());  // the strict tier never rotates
  EXPECT_FALSE(lab::parse_fidelity_arm("q4_0+rt").ok());
  auto arms = lab::parse_fidelity_arms("f16,q4_0,q4_0+rot");
  ASSERT_TRUE(arms.ok()) << arms.status().message();
  ModelConfig c;
  c.head_dim = 96;  // multiple of 32, not a power of two
  const Status s = lab::check_arms_supported(arms.value(), c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("power of two"), std::string::npos) << s.message();
  c.head_dim = 128;
  EXPECT_TRUE(lab::check_arms_supported(arms.value(), c).ok());
}

// ---- End to end on the fixtures whose head_dim is a power of two >= 32.

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

KvOptions kv_of(DType t, bool rotate) {
  KvOptions o;
  o.k_type = o.v_type = t;
  o.rotate = rotate;
  return o;
}

std::vector<float> all_logits(const Model& model, const std::vector<int32_t>& ids, const KvOptions& kv) {
  SessionOptions so;
  so.kv = kv;
  so.threads = 2;
  so.batch = 16;
  Session s(model, so);
  std::vector<float> logits(ids.size() * size_t(model.config().vocab_size));
  EXPECT_TRUE(s.feed(ids.data(), int64_t(ids.size()), logits.data(), nullptr).ok());
  return logits;
}

int64_t argmax(const float* x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[b]) b = i;
  return b;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

TEST(HadamardEndToEnd, RotatedQ8StaysCloseToF16AndF16NeverRotates) {
  int checked = 0;
  for (const char* name : {"qwen35_moe_hd256", "weft_tiny_hybrid_ref"}) {
    const std::string dir = test::source_dir() + "/tests/data/fixtures/" + name;
    if (!fs::exists(dir + "/reference.safetensors")) continue;
    auto model = Model::load(model_dir_of(dir));
    ASSERT_TRUE(model.ok()) << name << ": " << model.status().message();
    const ModelConfig& c = model.value()->config();
    ASSERT_TRUE(fwht_size_ok(c.head_dim) && c.head_dim % 32 == 0) << name;
    const std::vector<int32_t> ids = prompt_ids(dir);
    const int64_t V = c.vocab_size, T = int64_t(ids.size());
    const std::vector<float> ref = all_logits(*model.value(), ids, kv_of(DType::kF16, false));
    // rotate = true on an f16 cache is a no-op: bit-identical logits.
    EXPECT_EQ(all_logits(*model.value(), ids, kv_of(DType::kF16, true)), ref) << name;
    const std::vector<float> q8 = all_logits(*model.value(), ids, kv_of(DType::kQ8_0, false));
    for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
      const std::vector<float> got = all_logits(*model.value(), ids, kv_of(t, true));
      int64_t agree = 0;
      for (int64_t i = 0; i < T; ++i) agree += argmax(got.data() + i * V, V) == argmax(ref.data() + i * V, V);
      const double frac = double(agree) / double(T);
      std::printf("[ %s kv=%s+rot ] argmax agreement with f16 %lld / %lld; max |Δlogit| %.3e (q8_0 unrotated %.3e)\n",
                  name, dtype_name(t), (long long)agree, (long long)T, max_abs_diff(got, ref), max_abs_diff(q8, ref));
      if (t == DType::kQ8_0) {
        EXPECT_GE(frac, 0.99) << name;
        // Same error scale as unrotated q8_0 (a wrong rotation gives O(1) differences).
        EXPECT_LT(max_abs_diff(got, ref), 4 * max_abs_diff(q8, ref) + 1e-2) << name;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

TEST(HadamardEndToEnd, AssignFromConvertsBetweenRotatedAndPlainRows) {
  // A rotated q8_0 state copied into a plain f32 state (rows un-rotated on the way) must continue
  // like the rotated state itself; a missing conversion would give O(1) differences.
  const std::string dir = test::source_dir() + "/tests/data/fixtures/qwen35_moe_hd256";
  if (!fs::exists(dir + "/reference.safetensors")) GTEST_SKIP() << "fixture absent";
  auto model = Model::load(model_dir_of(dir));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const std::vector<int32_t> ids = prompt_ids(dir);
  ASSERT_GE(ids.size(), 3u);
  const int64_t V = model.value()->config().vocab_size, n = int64_t(ids.size()) - 1;
  SessionOptions so;
  so.threads = 2;
  so.kv = kv_of(DType::kQ8_0, true);
  Session rotated(*model.value(), so);
  so.kv = kv_of(DType::kF32, false);
  Session plain(*model.value(), so);
  so.kv = kv_of(DType::kQ8_0, false);
  Session plain_q8(*model.value(), so);
  ASSERT_TRUE(rotated.feed(ids.data(), n, nullptr, nullptr).ok());
  plain.state().assign_from(rotated.state());
  plain_q8.state().assign_from(rotated.state());
  std::vector<float> a(static_cast<size_t>(V)), b(a.size()), c(a.size());
  ASSERT_TRUE(rotated.step(ids[size_t(n)], a.data()).ok());
  ASSERT_TRUE(plain.step(ids[size_t(n)], b.data()).ok());
  ASSERT_TRUE(plain_q8.step(ids[size_t(n)], c.data()).ok());
  double scale = 0;
  for (float x : a) scale = std::max(scale, double(std::fabs(x)));
  std::printf("assign_from: max |Δlogit| rotated q8_0 -> f32 %.3e, -> plain q8_0 %.3e (max |logit| %.3e)\n",
              max_abs_diff(a, b), max_abs_diff(a, c), scale);
  EXPECT_LT(max_abs_diff(a, b), 2e-2 * scale);
  EXPECT_LT(max_abs_diff(a, c), 5e-2 * scale);
  // And back: plain f32 rows into a rotated q8_0 state.
  Session again(*model.value(), SessionOptions{kv_of(DType::kQ8_0, true), 2, 128});
  again.state().assign_from(plain.state());
  std::vector<float> d(static_cast<size_t>(V)), e(d.size());
  ASSERT_TRUE(again.step(ids[0], d.data()).ok());
  ASSERT_TRUE(plain.step(ids[0], e.data()).ok());
  EXPECT_LT(max_abs_diff(d, e), 5e-2 * scale);
}

}  // namespace
}  // namespace weft
