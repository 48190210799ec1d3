// Tests of the CPU matrix products and row conversions: accuracy against float64, and the
// determinism contract (bit-identity across T, tiling, thread count, and scalar vs AVX2 vs
// AVX-512).
#include <gtest/gtest.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "kernel_test_util.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vec_convert.h"

namespace weft {
namespace {

using test::GuardedBuffer;
using test::fresh_seed;

struct Problem {
  DType wtype;
  int64_t N, K, T, ldx, ldo;
  std::unique_ptr<GuardedBuffer> w;
  std::unique_ptr<GuardedBuffer> x;
  std::vector<float> w_f32;  // the weights as stored, widened (exactly) to f32
};

Problem make_problem(DType wtype, int64_t N, int64_t K, int64_t T, std::mt19937* rng) {
  Problem p{wtype, N, K, T, K + (T > 1 ? 3 : 0), N + 1, nullptr, nullptr, {}};
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t elem = dtype_size(wtype);
  p.w = std::make_unique<GuardedBuffer>(size_t(N * K) * elem);
  p.w_f32.resize(size_t(N * K));
  for (int64_t i = 0; i < N * K; ++i) {
    float v = dist(*rng);
    uint8_t* dst = p.w->data() + size_t(i) * elem;
    if (wtype == DType::kF32) {
      std::memcpy(dst, &v, 4);
    } else {
      uint16_t h = wtype == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(dst, &h, 2);
      v = wtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    p.w_f32[size_t(i)] = v;
  }
  // x rows are ldx apart; the last row ends at the guard page.
  const int64_t x_elems = (T - 1) * p.ldx + K;
  p.x = std::make_unique<GuardedBuffer>(size_t(x_elems) * 4);
  auto* x = reinterpret_cast<float*>(p.x->data());
  for (int64_t i = 0; i < x_elems; ++i) x[i] = dist(*rng);
  return p;
}

const float* x_of(const Problem& p) { return reinterpret_cast<const float*>(p.x->data()); }

using MatmulFn = void (*)(DType, const void*, int64_t, int64_t, const float*, int64_t, int64_t,
                          float*, int64_t, ThreadPool*);

std::vector<float> run(MatmulFn fn, const Problem& p, ThreadPool* pool) {
  std::vector<float> out(size_t(p.T * p.ldo), -12345.0f);
  fn(p.wtype, p.w->data(), p.N, p.K, x_of(p), p.ldx, p.T, out.data(), p.ldo, pool);
  return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

const DType kWeightTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
// 555 = 512 + 5 * 8 + 3: a second K block of full chunks and a tail chunk; 2053: only a tail.
const int64_t kKs[] = {1, 7, 31, 33, 257, 555, 2048 + 5};
const int64_t kNs[] = {1, 3, 17, 100};  // 3, 17: odd rows (AVX-512 pairs rows); 100: partial tasks
// 2..8: few-token tiles of 4, 2, 1 (AVX-512: few-token passes of 2..8); 8 | 9 and 32 | 33: the
// streaming / prefill boundaries of AVX2 and AVX-512 (kMatmulStreamingTokens*); 9, 17: AVX-512
// passes of 8 with a remainder; 33, 50, 64, 97: AVX-512 prefill blocks of 48 tokens in tiles of 6
// with remainder tiles of 3, 2, 4 and 1.
const int64_t kTs[] = {1, 2, 3, 4, 5, 7, 8, 9, 17, 33, 50, 64, 97};

// Every shape, every weight dtype: accuracy, T=1 vs batched, thread counts, scalar vs AVX2 vs
// AVX-512 (each fast path only where the CPU has it).
TEST(Matmul, AccuracyAndDeterminism) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ThreadPool pool1(1), pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool1, &pool2, &pool3};
  const bool avx2 = cpu_features().has_avx2_fma_f16c();
  const bool avx512 = cpu_features().has_avx512_core();
  if (!avx512) std::printf("note: this CPU has no AVX-512 F/BW/VL/DQ; matmul_avx512 not tested here\n");
  for (DType wtype : kWeightTypes) {
    for (int64_t K : kKs) {
      for (int64_t N : kNs) {
        for (int64_t T : kTs) {
          SCOPED_TRACE(std::string(dtype_name(wtype)) + " N=" + std::to_string(N) +
                       " K=" + std::to_string(K) + " T=" + std::to_string(T));
          Problem p = make_problem(wtype, N, K, T, &rng);
          const std::vector<float> out = run(matmul, p, nullptr);

          // Accuracy. Each of the 8 lanes sums ceil(K/8) products with FMA and the reduction
          // adds 3 more roundings, so |err| <= (ceil(K/8) + 3) * 2^-24 * sum_k |w_k x_k|
          // (first-order bound; the weights are taken as stored, since widening is exact).
          const double gamma = double((K + 7) / 8 + 3) * std::ldexp(1.0, -24) * 1.01;
          int bad = 0;
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t n = 0; n < N; ++n) {
              double ref = 0, mag = 0;
              for (int64_t k = 0; k < K; ++k) {
                double prod = double(p.w_f32[size_t(n * K + k)]) * double(x_of(p)[t * p.ldx + k]);
                ref += prod;
                mag += std::fabs(prod);
              }
              const double got = out[size_t(t * p.ldo + n)];
              if (!(std::fabs(got - ref) <= gamma * mag) && ++bad <= 5) {
                ADD_FAILURE() << "t=" << t << " n=" << n << " got " << got << " want " << ref;
              }
            }
            // Padding columns of out are untouched.
            EXPECT_EQ(out[size_t(t * p.ldo + N)], -12345.0f);
          }

          // T=1 calls give the very bits of the batched call, row by row.
          for (int64_t t = 0; t < T && T > 1; ++t) {
            std::vector<float> one(static_cast<size_t>(N));
            matmul(wtype, p.w->data(), N, K, x_of(p) + t * p.ldx, K, 1, one.data(), N, nullptr);
            for (int64_t n = 0; n < N; ++n) {
              ASSERT_TRUE(same_bits(one[size_t(n)], out[size_t(t * p.ldo + n)]))
                  << "T=1 vs batched, t=" << t << " n=" << n;
            }
          }

          // Thread counts, and the scalar twin (with and without threads).
          for (ThreadPool* pool : pools) {
            std::vector<float> got = run(matmul, p, pool);
            ASSERT_EQ(0, std::memcmp(got.data(), out.data(), out.size() * 4))
                << "pool of " << (pool ? pool->size() : 1);
            if (avx2) {
              got = run(matmul_avx2, p, pool);
              ASSERT_EQ(0, std::memcmp(got.data(), out.data(), out.size() * 4)) << "avx2";
            }
            if (avx512) {
              got = run(matmul_avx512, p, pool);
              ASSERT_EQ(0, std::memcmp(got.data(), out.data(), out.size() * 4)) << "avx512";
            }
            if (K * N * T <= 200000 || pool == &pool2) {  // the scalar twin is slow
              got = run(matmul_scalar, p, pool);
              for (size_t i = 0; i < out.size(); ++i) {
                ASSERT_TRUE(same_bits(got[i], out[i])) << "scalar vs fast at " << i;
              }
            }
          }
        }
      }
    }
  }
}

// Prefill task shapes: row blocks of matmul_prefill_rows_per_task (64 / 48 / 32 / 16 rows on
// AVX-512 depending on K) with partial last blocks, and token ranges (pools with fewer row blocks
// than 3 per thread split T in multiples of 48 tokens, ranges >= 96) with partial last ranges.
// Every path, every pool size, against the scalar twin bit for bit, on fresh random data.
TEST(Matmul, PrefillTaskGrainsKeepBits) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ThreadPool pool2(2), pool3(3), pool8(8);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3, &pool8};
  const bool avx2 = cpu_features().has_avx2_fma_f16c();
  const bool avx512 = cpu_features().has_avx512_core();
  struct Shape {
    int64_t N, K, T;
  };
  // K 2053 -> 48-row blocks, 4100 -> 16; N 65 / 100 / 129: one row past a block, partial blocks;
  // T 191 / 200 / 337: ranges of 96 / 144 with a short last one; 97 with 8 threads: no split.
  const Shape shapes[] = {{65, 31, 337}, {129, 555, 200}, {100, 2053, 191}, {17, 4100, 97},
                          {64, 8, 288}, {1, 257, 250}, {3, 7, 500}};
  for (DType wtype : kWeightTypes) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(wtype)) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                   " T=" + std::to_string(s.T));
      Problem p = make_problem(wtype, s.N, s.K, s.T, &rng);
      const std::vector<float> want = run(matmul_scalar, p, nullptr);
      for (ThreadPool* pool : pools) {
        SCOPED_TRACE("pool of " + std::to_string(pool ? pool->size() : 1));
        ASSERT_EQ(0, std::memcmp(run(matmul, p, pool).data(), want.data(), want.size() * 4));
        if (avx2) ASSERT_EQ(0, std::memcmp(run(matmul_avx2, p, pool).data(), want.data(), want.size() * 4));
        if (avx512) ASSERT_EQ(0, std::memcmp(run(matmul_avx512, p, pool).data(), want.data(), want.size() * 4));
      }
    }
  }
}

// The streaming kernels at every token count: each path with its decode/prefill boundary at 64,
// so T = 1..20, 32 and 33 (AVX-512: few-token passes of 2..8 tokens, then groups of 8 with a
// remainder pass) all stream, and at 0, so the same T all take the prefill kernels. Odd N and K
// cover the odd last row, the one-pair leftovers after groups of 8 or 6 rows and the tail chunk.
// Every pool size, against the scalar twin bit for bit, on fresh random data.
TEST(Matmul, StreamingKernelsKeepBitsAtEveryTokenCount) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  const bool avx2 = cpu_features().has_avx2_fma_f16c();
  const bool avx512 = cpu_features().has_avx512_core();
  if (!avx2 && !avx512) GTEST_SKIP() << "no SIMD path on this CPU";
  struct Shape {
    int64_t N, K;
  };
  const Shape shapes[] = {{1, 9}, {7, 33}, {13, 555}, {37, 2053}, {70, 256}};
  std::vector<int64_t> ts;
  for (int64_t t = 1; t <= 20; ++t) ts.push_back(t);
  ts.push_back(32);
  ts.push_back(33);
  for (DType wtype : kWeightTypes) {
    for (const Shape& s : shapes) {
      for (int64_t T : ts) {
        SCOPED_TRACE(std::string(dtype_name(wtype)) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                     " T=" + std::to_string(T));
        Problem p = make_problem(wtype, s.N, s.K, T, &rng);
        const std::vector<float> want = run(matmul_scalar, p, nullptr);
        for (ThreadPool* pool : pools) {
          for (int64_t boundary : {int64_t(64), int64_t(0)}) {
            SCOPED_TRACE("pool of " + std::to_string(pool ? pool->size() : 1) + ", boundary " +
                         std::to_string(boundary));
            std::vector<float> got(want.size(), -12345.0f);
            if (avx2) {
              matmul_avx2_boundary(boundary, wtype, p.w->data(), p.N, p.K, x_of(p), p.ldx, p.T, got.data(), p.ldo,
                                   pool);
              ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << "avx2";
            }
            if (avx512) {
              std::fill(got.begin(), got.end(), -12345.0f);
              matmul_avx512_boundary(boundary, wtype, p.w->data(), p.N, p.K, x_of(p), p.ldx, p.T, got.data(), p.ldo,
                                     pool);
              ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << "avx512";
            }
          }
        }
      }
    }
  }
}

// All-(-0) rows and infinities give the same bits on every path, tail or no tail, decode or
// prefill tile (T = 1 and T = 13), and a row of -0 next to an inf row (AVX-512 pairs them).
TEST(Matmul, SignedZeroAndSpecials) {
  std::vector<MatmulFn> fns = {matmul_scalar, matmul};
  if (cpu_features().has_avx2_fma_f16c()) fns.push_back(matmul_avx2);
  if (cpu_features().has_avx512_core()) fns.push_back(matmul_avx512);
  for (int64_t K : {3, 8, 11}) {
    for (int64_t T : {1, 13}) {
      std::vector<float> w(size_t(3 * K), -0.0f), x(size_t(T * K), 1.0f);
      w[size_t(K)] = std::numeric_limits<float>::infinity();
      std::vector<float> want(size_t(3 * T));
      matmul_scalar(DType::kF32, w.data(), 3, K, x.data(), K, T, want.data(), 3, nullptr);
      EXPECT_TRUE(std::isinf(want[1]));
      for (MatmulFn fn : fns) {
        std::vector<float> got(size_t(3 * T));
        fn(DType::kF32, w.data(), 3, K, x.data(), K, T, got.data(), 3, nullptr);
        for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bits(want[i], got[i])) << i << ": " << want[i] << " " << got[i];
      }
    }
  }
}

TEST(VecConvert, WideningMatchesScalarForEveryValue) {
  if (!cpu_features().has_avx2_fma_f16c()) GTEST_SKIP() << "no AVX2";
  const int64_t n = 65536 + 5;  // every 16-bit pattern, plus a tail
  std::vector<uint16_t> src(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) src[size_t(i)] = uint16_t(i);
  for (DType t : {DType::kF16, DType::kBF16}) {
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
    convert_row_to_f32_scalar(t, src.data(), a.data(), n);
    convert_row_to_f32_avx2(t, src.data(), b.data(), n);
    convert_row_to_f32(t, src.data(), c.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float va = a[size_t(i)], vb = b[size_t(i)];
      if (std::isnan(va)) {
        EXPECT_TRUE(std::isnan(vb)) << dtype_name(t) << " " << i;  // payloads may differ
      } else {
        ASSERT_TRUE(same_bits(va, vb)) << dtype_name(t) << " " << i;
      }
      ASSERT_TRUE(same_bits(b[size_t(i)], c[size_t(i)]) || std::isnan(va));
    }
  }
}

TEST(VecConvert, NarrowingMatchesScalar) {
  if (!cpu_features().has_avx2_fma_f16c()) GTEST_SKIP() << "no AVX2";
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Random bit patterns cover every exponent (subnormals, overflow, NaN); the listed values
  // cover exact ties and boundaries.
  std::vector<float> src;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    src.push_back(f);
  }
  for (int i = 0; i < 200000; ++i) src.push_back(std::ldexp(float(rng() % 4096), -30 + int(rng() % 50)));
  for (float f : {0.0f, -0.0f, 65504.0f, 65520.0f, 65519.99f, 1.0f + std::ldexp(1.0f, -11),
                  std::ldexp(1.0f, -25), std::ldexp(1.0f, -24), std::ldexp(3.0f, -26),
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN(),
                  1.00390625f, 1.01171875f}) {
    src.push_back(f);
  }
  src.push_back(1.0f);  // odd length: exercises the tail
  const int64_t n = int64_t(src.size());
  std::vector<uint16_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
  convert_row_f32_to_f16_scalar(src.data(), a.data(), n);
  convert_row_f32_to_f16_avx2(src.data(), b.data(), n);
  convert_row_f32_to_f16(src.data(), c.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[size_t(i)], b[size_t(i)]) << "f16 of " << src[size_t(i)];
    ASSERT_EQ(b[size_t(i)], c[size_t(i)]);
  }
  convert_row_f32_to_bf16_scalar(src.data(), a.data(), n);
  convert_row_f32_to_bf16_avx2(src.data(), b.data(), n);
  convert_row_f32_to_bf16(src.data(), c.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[size_t(i)], b[size_t(i)]) << "bf16 of " << src[size_t(i)];
    ASSERT_EQ(b[size_t(i)], c[size_t(i)]);
  }
}

// Throughput numbers for the comments atop matmul_avx2.cpp (and results.md 8.1). Run with
//   matmul_test --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'
// Calls cycle over copies of the weights totalling 128 MiB, so that decode reads them from DRAM
// and not from the last-level cache.
TEST(Matmul, DISABLED_Throughput) {
  const int64_t N = 4096, K = 2048, kMaxT = 64;
  std::mt19937 rng(1);
  for (DType wtype : kWeightTypes) {
    const size_t matrix_bytes = size_t(N * K) * dtype_size(wtype);
    const int64_t copies = int64_t((size_t(128) << 20) / matrix_bytes);
    Problem p = make_problem(wtype, N * copies, K, kMaxT, &rng);
    std::vector<float> out(size_t(kMaxT * N));
    // Both fast paths side by side, each where the CPU has it.
    std::vector<std::pair<const char*, MatmulFn>> paths;
    if (cpu_features().has_avx2_fma_f16c()) paths.push_back({"avx2", matmul_avx2});
    if (cpu_features().has_avx512_core()) paths.push_back({"avx512", matmul_avx512});
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (int64_t T : {int64_t(1), kMaxT}) {
        for (const auto& [name, fn] : paths) {
          const int reps = T == 1 ? 200 : 8;
          auto call = [&, fn = fn](int r) {
            const uint8_t* w = p.w->data() + size_t(r % copies) * matrix_bytes;
            fn(wtype, w, N, K, x_of(p), p.ldx, T, out.data(), N, &pool);
          };
          for (int r = 0; r < copies; ++r) call(r);  // warm up: page in every copy
          double best = 1e30;
          for (int r = 0; r < reps; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            call(r);
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
          // The fastest call: on a shared machine, slower ones mostly measure other load.
          const double gbs = double(matrix_bytes) / best / 1e9;
          const double gflops = 2.0 * double(N * K * T) / best / 1e9;
          printf("%-6s %-4s threads=%d T=%-3lld %8.3f ms  weights %6.2f GB/s  %7.2f GFLOP/s\n", name,
                 dtype_name(wtype), threads, (long long)T, best * 1e3, gbs, gflops);
        }
      }
    }
  }
}

// The machine's f32 FMA rate: 16 independent FMA chains per thread, registers only, at the
// widest width the CPU has (the AVX-512 path uses zmm; Zen4 splits them, a Xeon does not).
__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iters, float seed) {
  __m256 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm256_set1_ps(seed + float(i) * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm256_add_ps(s, a[i]);
  return _mm256_cvtss_f32(s);
}
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters, float seed) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(seed + float(i) * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

double fma_peak_gflops(ThreadPool* pool) {
  const bool avx512 = cpu_features().has_avx512_core();
  const int64_t iters = 50000000;
  std::vector<float> sink(size_t(pool->size()) * 16);
  auto t0 = std::chrono::steady_clock::now();
  pool->parallel_for(pool->size(), [&](int64_t th) {
    sink[size_t(th) * 16] = avx512 ? fma_chains_avx512(iters, float(th)) : fma_chains_avx2(iters, float(th));
  });
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(std::isfinite(sink[0]));
  return 2.0 * 16.0 * (avx512 ? 16.0 : 8.0) * double(iters) * double(pool->size()) / sec / 1e9;
}

// Prefill-shaped products of the Qwen3.5-35B-A3B geometry (bf16): an expert's fused gate/up and
// its down projection with the rows one expert gets in a 2432-row prefill call (top-8 of 32),
// a GDN input projection and a k/v projection over the whole call; GFLOP/s of matmul() next to
// the machine's FMA rate. Run with
//   matmul_test --gtest_also_run_disabled_tests --gtest_filter='*PrefillShapes*'
TEST(Matmul, DISABLED_PrefillShapes) {
  struct Shape {
    const char* name;
    int64_t N, K, T;
  };
  const Shape shapes[] = {{"expert gate+up", 1024, 2048, 608},
                          {"expert down", 2048, 512, 608},
                          {"gdn in_proj", 12288, 2048, 2432},
                          {"k/v proj", 512, 2048, 2432},
                          // The shipped model (hidden 384, MLP 1024) over a 4096-token prompt.
                          {"tiny mlp gate+up", 2048, 384, 4096},
                          {"tiny mlp down", 384, 1024, 4096},
                          {"tiny gdn qkvz", 1536, 384, 4096}};
  std::mt19937 rng(1);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    printf("threads=%d  f32 FMA rate %.1f GFLOP/s\n", threads, fma_peak_gflops(&pool));
    for (const Shape& s : shapes) {
      Problem p = make_problem(DType::kBF16, s.N, s.K, s.T, &rng);
      std::vector<float> out(size_t(s.T * p.ldo));
      std::vector<double> times;
      for (int r = 0; r < 7; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        matmul(DType::kBF16, p.w->data(), s.N, s.K, x_of(p), p.ldx, s.T, out.data(), p.ldo, &pool);
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(times.begin(), times.end());
      printf("  %-15s N=%-5lld K=%-5lld T=%-5lld median %8.3f ms  %7.1f GFLOP/s (best %7.1f)\n", s.name,
             (long long)s.N, (long long)s.K, (long long)s.T, times[3] * 1e3,
             2.0 * double(s.N * s.K * s.T) / times[3] / 1e9, 2.0 * double(s.N * s.K * s.T) / times[0] / 1e9);
    }
  }
}

}  // namespace
}  // namespace weft
