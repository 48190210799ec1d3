// attention_f16_prefill (query-block-tiled strict prefill) and attention_f16_decode (its
// primitives under the frozen kernel's decode task split): every output row bit-identical
// (memcmp) to the frozen attention_f16, for any thread count, any query block size, and on each
// primitive set (AVX-512 where the CPU has it, AVX2, the scalar twins); plus a
// disabled-by-default throughput comparison.
#include "kernels/cpu/attention_f16_prefill.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/row_max.h"

namespace weft {
namespace {

uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* e = std::getenv("WEFT_TEST_SEED");
    const uint64_t s = e ? std::strtoull(e, nullptr, 10) : std::random_device{}();
    std::printf("[ attention_f16_prefill_test ] seed %llu (rerun with WEFT_TEST_SEED=%llu)\n", (unsigned long long)s,
                (unsigned long long)s);
    return s;
  }();
  return seed;
}

struct Problem {
  int64_t T, pos0, hd, n_kv, group, page_tokens;
  float q_scale;  // larger queries give peakier softmaxes (exp underflow, big max changes)
};

std::string describe(const Problem& p) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "T %lld pos0 %lld hd %lld n_kv %lld group %lld page %lld q_scale %g", (long long)p.T,
                (long long)p.pos0, (long long)p.hd, (long long)p.n_kv, (long long)p.group, (long long)p.page_tokens,
                double(p.q_scale));
  return buf;
}

struct Fixture {
  std::vector<float> q;
  std::unique_ptr<KvCache> cache;
};

Fixture make_fixture(const Problem& p, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t ctx = p.pos0 + p.T, nh = p.n_kv * p.group;
  std::vector<float> k(size_t(ctx * p.n_kv * p.hd)), v(k.size());
  Fixture f;
  f.q.resize(size_t(p.T * nh * p.hd));
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (auto& x : f.q) x = nd(rng) * p.q_scale;
  f.cache = std::make_unique<KvCache>(KvCacheSpec{1, p.n_kv, p.hd, DType::kF16, DType::kF16, p.page_tokens});
  // Appended in uneven pieces, as prefill batches and decode steps would.
  for (int64_t t0 = 0; t0 < ctx;) {
    const int64_t n = std::min<int64_t>(ctx - t0, 1 + (t0 % 97));
    f.cache->append(0, k.data() + t0 * p.n_kv * p.hd, v.data() + t0 * p.n_kv * p.hd, n);
    t0 += n;
  }
  return f;
}

// Rows (token, head) whose bits differ, for the failure message.
std::string diff_rows(const std::vector<float>& a, const std::vector<float>& b, int64_t nh, int64_t hd) {
  std::string s;
  int shown = 0;
  for (size_t r = 0; r < a.size() / size_t(hd) && shown < 4; ++r)
    if (std::memcmp(a.data() + r * size_t(hd), b.data() + r * size_t(hd), size_t(hd) * 4) != 0) {
      s += " (t " + std::to_string(int64_t(r) / nh) + " head " + std::to_string(int64_t(r) % nh) + ")";
      ++shown;
    }
  return s;
}

// Reference: the frozen kernel. Then the new kernel on both paths, several thread counts and
// query block sizes; every run must reproduce the reference's bits exactly.
void check_problem(const Problem& p, std::mt19937_64& rng, bool scalar_twin) {
  Fixture f = make_fixture(p, rng);
  const int64_t nh = p.n_kv * p.group;
  const KvLayerView view = f.cache->view(0);
  AttentionArgs a{f.q.data(), p.T, p.pos0, nh, 1.0f / std::sqrt(float(p.hd)), nullptr};
  std::vector<float> ref(f.q.size(), NAN), got(f.q.size());
  ThreadPool pool2(2);
  a.out = ref.data();
  attention_f16(view, a, &pool2);
  for (float x : ref) ASSERT_TRUE(std::isfinite(x)) << describe(p);

  a.out = got.data();
  auto expect_same = [&](const std::string& what) {
    EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * 4))
        << describe(p) << " " << what << diff_rows(ref, got, nh, p.hd);
  };
  for (int threads : {0, 1, 2, 3}) {
    std::fill(got.begin(), got.end(), NAN);
    if (threads == 0) {
      attention_f16_prefill(view, a, nullptr);
    } else {
      ThreadPool pool(threads);
      attention_f16_prefill(view, a, &pool);
    }
    expect_same("threads " + std::to_string(threads));
  }
  // Split invariance: the rows' bits do not depend on how tokens are grouped into tasks.
  for (int64_t bq : {1, 3, 16, 64}) {
    std::fill(got.begin(), got.end(), NAN);
    attention_f16_prefill_blocked(view, a, &pool2, bq, AttnTiledPath::kBest);
    expect_same("block " + std::to_string(bq));
  }
  // The AVX2 primitives where the best set is AVX-512 (the same call otherwise).
  std::fill(got.begin(), got.end(), NAN);
  attention_f16_prefill_blocked(view, a, &pool2, 0, AttnTiledPath::kAvx2);
  expect_same("avx2 primitives");
  if (scalar_twin) {
    std::fill(got.begin(), got.end(), NAN);
    attention_f16_prefill_scalar(view, a, &pool2);
    expect_same("scalar twin");
    std::fill(got.begin(), got.end(), NAN);
    attention_f16_prefill_blocked(view, a, &pool2, 5, AttnTiledPath::kScalar);
    expect_same("scalar twin block 5");
  }
}

// The sweep of the issue: T × pos0 × head_dim × GQA, pages of 256 (chunk-aligned) and of 16.
TEST(AttentionF16Prefill, BitIdenticalToAttentionF16) {
  std::mt19937_64 rng(test_seed());
  for (int64_t hd : {64, 128, 256})
    for (int64_t group : {1, 2, 4, 8})
      for (int64_t pos0 : {0, 1, 300})
        for (int64_t T : {1, 2, 3, 17, 64, 255, 256, 257, 600}) {
          const int64_t n_kv = group <= 2 ? 2 : 1;
          const int64_t page = pos0 == 1 ? 16 : 256;
          // The scalar twin is slow (library fma): on the smaller problems and the chunk edges.
          const bool scalar = T <= 257 && (hd != 256 || group <= 2);
          check_problem({T, pos0, hd, n_kv, group, page, 1.0f}, rng, scalar);
        }
}

// Peaky softmaxes (large scores: many exp underflow to 0, maxima jump between chunks), a head
// size that is not a multiple of 8 or 16, and the shipped model's geometry past two chunks.
TEST(AttentionF16Prefill, EdgeShapesAndPeakyScores) {
  std::mt19937_64 rng(test_seed() + 1);
  check_problem({300, 200, 256, 2, 2, 256, 8.0f}, rng, true);
  check_problem({77, 500, 128, 2, 4, 256, 20.0f}, rng, true);
  check_problem({40, 250, 72, 1, 3, 16, 1.0f}, rng, true);
  check_problem({33, 7, 20, 3, 1, 256, 2.0f}, rng, true);
  check_problem({700, 0, 256, 2, 2, 256, 1.0f}, rng, false);
}

// Decode (T = 1) through the tiled primitives: the frozen kernel's bits at every key count
// around the 256-key chunks and the primitives' 12-key and 32-key blocks, GQA groups that fill
// row pairs and tiles unevenly (1, 3, 5, 7 rows; 12 and 16 rows = two tiles), head sizes whose
// last slice is 16 dims (80), not a multiple of 16 (72, 20: the AVX2 fallback), pages of 16
// tokens, peaky softmaxes, each primitive set and thread count; and attention_f16_strict, what
// the CPU backend runs.
void check_decode(const Problem& p, std::mt19937_64& rng, bool scalar_twin) {
  Fixture f = make_fixture(p, rng);
  const int64_t nh = p.n_kv * p.group;
  const KvLayerView view = f.cache->view(0);
  AttentionArgs a{f.q.data(), 1, p.pos0, nh, 1.0f / std::sqrt(float(p.hd)), nullptr};
  std::vector<float> ref(f.q.size(), NAN), got(f.q.size());
  a.out = ref.data();
  attention_f16(view, a, nullptr);
  for (float x : ref) ASSERT_TRUE(std::isfinite(x)) << describe(p);
  a.out = got.data();
  auto expect_same = [&](const std::string& what) {
    EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * 4))
        << describe(p) << " decode " << what << diff_rows(ref, got, nh, p.hd);
  };
  std::vector<AttnTiledPath> paths = {AttnTiledPath::kBest, AttnTiledPath::kAvx2};
  if (scalar_twin) paths.push_back(AttnTiledPath::kScalar);
  for (AttnTiledPath path : paths)
    for (int threads : {0, 1, 3}) {
      std::fill(got.begin(), got.end(), NAN);
      const std::string what = "path " + std::to_string(int(path)) + " threads " + std::to_string(threads);
      if (threads == 0) {
        attention_f16_decode(view, a, nullptr, path);
      } else {
        ThreadPool pool(threads);
        attention_f16_decode(view, a, &pool, path);
      }
      expect_same(what);
    }
  std::fill(got.begin(), got.end(), NAN);
  ThreadPool pool2(2);
  attention_f16_strict(view, a, &pool2);
  expect_same("attention_f16_strict");
}

TEST(AttentionF16Decode, BitIdenticalToAttentionF16) {
  std::mt19937_64 rng(test_seed() + 2);
  for (int64_t hd : {64, 80, 128, 256})
    for (int64_t group : {1, 2, 3, 5, 8, 12, 16})
      for (int64_t n_keys : {1, 2, 13, 33, 255, 256, 257, 600}) {
        const int64_t n_kv = group <= 3 ? 2 : 1;
        check_decode({1, n_keys - 1, hd, n_kv, group, n_keys % 2 ? 16 : 256, 1.0f}, rng,
                     hd <= 128 && n_keys <= 257);
      }
}

TEST(AttentionF16Decode, LongContextsOddHeadsAndPeakyScores) {
  std::mt19937_64 rng(test_seed() + 3);
  check_decode({1, 4099, 256, 2, 8, 256, 1.0f}, rng, false);    // 17 chunks: the parallel merge
  check_decode({1, 5000, 128, 2, 7, 16, 8.0f}, rng, false);
  check_decode({1, 700, 256, 2, 4, 256, 20.0f}, rng, true);
  check_decode({1, 300, 72, 1, 3, 16, 1.0f}, rng, true);       // hd % 16 == 8: AVX2 fallback
  check_decode({1, 90, 20, 3, 1, 256, 2.0f}, rng, true);       // hd % 8 != 0: scalar tails
  check_decode({1, 1000, 256, 1, 16, 256, 1.0f}, rng, false);  // two row tiles
}

// row_max against the loop it replaces, on rows with NaNs (first and later), infinities and
// zeros of both signs: the same bits, except that a zero max may carry the other sign (which no
// output can see: see row_max.h).
TEST(RowMax, EqualsTheSequentialLoop) {
  std::mt19937_64 rng(test_seed() + 4);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_int_distribution<int> pick(0, 9);
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
  for (int trial = 0; trial < 4000; ++trial) {
    const int64_t n = 1 + trial % 41;
    std::vector<float> s(static_cast<size_t>(n));
    for (auto& x : s) x = pick(rng) == 0 ? specials[pick(rng) % 5] : (pick(rng) < 3 ? 0.0f : nd(rng));
    float m = s[0];
    for (int64_t j = 1; j < n; ++j) m = std::max(m, s[size_t(j)]);
    const float got = row_max(s.data(), n);
    if (m == 0.0f && got == 0.0f) continue;
    EXPECT_EQ(0, std::memcmp(&m, &got, 4)) << "n " << n << " trial " << trial << ": " << m << " vs " << got;
  }
}

double time_ms(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Kernel-level prefill speed on the shipped model's geometry (head_dim 256, 4 q heads, 2 kv
// heads), interleaved with the frozen kernel, best of 5 each.
TEST(AttentionF16PrefillBench, DISABLED_Throughput) {
  const int64_t hd = 256, n_kv = 2, group = 2, nh = n_kv * group;
  const int threads = 2;
  ThreadPool pool(threads);
  std::mt19937_64 rng(7);
  for (int64_t T : {1024, 4096}) {
    Fixture f = make_fixture({T, 0, hd, n_kv, group, 256, 1.0f}, rng);
    const KvLayerView view = f.cache->view(0);
    std::vector<float> out(f.q.size());
    AttentionArgs a{f.q.data(), T, 0, nh, 1.0f / 16.0f, out.data()};
    double best_old = 1e30, best_new = 1e30;
    for (int round = 0; round < 6; ++round) {
      const double old_ms = time_ms([&] { attention_f16(view, a, &pool); });
      const double new_ms = time_ms([&] { attention_f16_prefill(view, a, &pool); });
      if (round > 0) {
        best_old = std::min(best_old, old_ms);
        best_new = std::min(best_new, new_ms);
      }
    }
    const double flop = double(T) * double(T + 1) / 2 * double(nh) * double(hd) * 4;
    std::printf("prefill T=%lld (%s, %d threads): attention_f16 %.1f ms (%.1f GFLOP/s), attention_f16_prefill %.1f "
                "ms (%.1f GFLOP/s), %.2fx\n",
                (long long)T, simd_level_name(simd_level()), threads, best_old, flop / best_old / 1e6, best_new,
                flop / best_new / 1e6, best_old / best_new);
  }
}

}  // namespace
}  // namespace weft
