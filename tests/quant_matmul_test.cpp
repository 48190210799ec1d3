// Tests of the quantized-weight matrix products: exactness against float64 on the quantized
// activations, the activation-quantization error bound against f32 activations, and the
// determinism contract (AVX2 == AVX-512 VNNI == scalar bit for bit, T = 1 == T > 1 per row, any
// thread count, any row slicing, the grouped expert path).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "core/cpu_features.h"
#include "core/quant_types.h"
#include "core/thread_pool.h"
#include "backend/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"

namespace weft {
namespace {

using test::GuardedBuffer;
using test::fresh_seed;

constexpr GgmlType kQuantTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K,
                                    GgmlType::kQ5_K, GgmlType::kQ6_K};

struct Problem {
  GgmlType type;
  int64_t N, K, T, ldx, ldo;
  std::unique_ptr<GuardedBuffer> w;
  std::vector<float> w_deq;  // the stored weights, decoded
  std::vector<float> x;      // T rows, ldx apart
};

Problem make_problem(GgmlType type, int64_t N, int64_t K, int64_t T, std::mt19937* rng) {
  Problem p{type, N, K, T, K + 5, N + 3, nullptr, {}, {}};
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const size_t row_bytes = ggml_row_bytes(type, K);
  p.w = std::make_unique<GuardedBuffer>(row_bytes * size_t(N));
  p.w_deq.resize(size_t(N * K));
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    for (auto& v : row) v = gauss(*rng) * 0.05f;
    row[(*rng)() % size_t(K)] *= 15.0f;  // an outlier per row
    quantize_row(type, row.data(), p.w->data() + size_t(n) * row_bytes, K);
    dequantize_row(type, p.w->data() + size_t(n) * row_bytes, p.w_deq.data() + size_t(n * K), K);
  }
  p.x.assign(size_t(T * p.ldx), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) p.x[size_t(t * p.ldx + k)] = gauss(*rng) * (k % 97 == 0 ? 8.0f : 1.0f);
  return p;
}

using Fn = void (*)(GgmlType, const void*, int64_t, int64_t, const float*, int64_t, int64_t, float*,
                    int64_t, ThreadPool*);

std::vector<float> run(const Problem& p, Fn fn, ThreadPool* pool) {
  std::vector<float> out(size_t(p.T * p.ldo), -12345.0f);
  fn(p.type, p.w->data(), p.N, p.K, p.x.data(), p.ldx, p.T, out.data(), p.ldo, pool);
  return out;
}

// Prints the first mismatches so a failure explains itself.
void expect_bit_identical(const Problem& p, const std::vector<float>& a, const std::vector<float>& b,
                          const char* what) {
  int shown = 0, bad = 0;
  for (int64_t t = 0; t < p.T; ++t) {
    for (int64_t n = 0; n < p.N; ++n) {
      const float va = a[size_t(t * p.ldo + n)], vb = b[size_t(t * p.ldo + n)];
      if (std::memcmp(&va, &vb, 4) != 0) {
        ++bad;
        if (shown++ < 5) ADD_FAILURE() << what << ": t=" << t << " n=" << n << " " << va << " vs " << vb;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << " (" << ggml_type_name(p.type) << " N=" << p.N << " K=" << p.K << " T=" << p.T << ")";
}

// Shapes: block edges (one block, one super-block, two), a large K that is not a power of two,
// odd row counts (not multiples of the 4-row groups or the 16-row tasks).
struct Shape { int64_t N, K, T; };
std::vector<Shape> shapes_for(GgmlType t) {
  const int64_t bs = ggml_block_size(t);
  return {{1, bs, 1}, {7, bs, 3}, {5, 256, 2}, {33, 512, 1}, {19, 512, 9}, {37, 4096 + 256, 1}, {11, 4096 + 256, 3}};
}

TEST(QuantMatmul, ExactOnQuantizedActivationsAndBoundedOnF32) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (GgmlType type : kQuantTypes) {
    for (const Shape& s : shapes_for(type)) {
      Problem p = make_problem(type, s.N, s.K, s.T, &rng);
      const std::vector<float> out = run(p, quant_matmul, nullptr);
      const GgmlType at = activation_type(type);
      const int64_t abs_ = ggml_block_size(at);
      std::vector<uint8_t> xq(ggml_row_bytes(at, p.K));
      std::vector<float> xd(size_t(p.K));
      double worst_exact = 0, worst_bound = 0;
      for (int64_t t = 0; t < p.T; ++t) {
        const float* xt = p.x.data() + t * p.ldx;
        quantize_activations(type, xt, p.K, xq.data());
        dequantize_row(at, xq.data(), xd.data(), p.K);
        for (int64_t n = 0; n < p.N; ++n) {
          const float* wr = p.w_deq.data() + n * p.K;
          double exact = 0, abs_sum = 0, ref = 0, bound = 0;
          for (int64_t k = 0; k < p.K; ++k) {
            exact += double(wr[k]) * xd[size_t(k)];
            abs_sum += std::fabs(double(wr[k]) * xd[size_t(k)]);
            ref += double(wr[k]) * xt[k];
          }
          // Half a step of each activation block's scale (dx = max|x_b| / 127), times |w| there.
          for (int64_t b0 = 0; b0 < p.K; b0 += abs_) {
            double amax = 0, wabs = 0;
            for (int64_t k = b0; k < b0 + abs_; ++k) {
              amax = std::max(amax, std::fabs(double(xt[k])));
              wabs += std::fabs(double(wr[k]));
            }
            bound += wabs * amax / 127.0 * (0.5 + 127.0 / 2048);  // codes against the f32 scale, stored as f16 (2^-11)
          }
          const double y = out[size_t(t * p.ldo + n)];
          const double tol_exact = 2e-6 * double(p.K / abs_ + 8) * abs_sum + 1e-30;
          ASSERT_LE(std::fabs(y - exact), tol_exact)
              << ggml_type_name(type) << " N=" << p.N << " K=" << p.K << " t=" << t << " n=" << n
              << ": " << y << " vs exact " << exact;
          ASSERT_LE(std::fabs(y - ref), bound + tol_exact)
              << ggml_type_name(type) << " N=" << p.N << " K=" << p.K << " t=" << t << " n=" << n
              << ": " << y << " vs f64 " << ref;
          worst_exact = std::max(worst_exact, std::fabs(y - exact) / (abs_sum + 1e-30));
          worst_bound = std::max(worst_bound, std::fabs(y - ref) / (bound + 1e-30));
        }
      }
      if (s.K > 4096)
        std::printf("%-5s K=%-5lld worst |y-exact|/sum|wx| %.2e, worst |y-f64|/activation bound %.3f\n",
                    ggml_type_name(type), (long long)s.K, worst_exact, worst_bound);
    }
  }
}

TEST(QuantMatmul, Avx2IsBitIdenticalToScalar) {
  if (!cpu_features().has_avx2_fma_f16c()) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ThreadPool pool(2);
  for (GgmlType type : kQuantTypes) {
    for (const Shape& s : shapes_for(type)) {
      Problem p = make_problem(type, s.N, s.K, s.T, &rng);
      expect_bit_identical(p, run(p, quant_matmul_scalar, nullptr), run(p, quant_matmul_avx2, &pool),
                           "scalar vs avx2");
    }
  }
}

bool has_vnni_path() { return cpu_features().has_avx512_core() && cpu_features().avx512_vnni; }
constexpr const char* kNoVnni = "no AVX-512 F/BW/VL/DQ + VNNI on this CPU: the AVX-512 path cannot run here";

// Odd row counts (an unpaired last row goes to the AVX2 kernel), pairs, one row; token counts
// below, at and above the 4-token tiles.
std::vector<Shape> avx512_shapes_for(GgmlType t) {
  std::vector<Shape> v = shapes_for(t);
  const int64_t bs = ggml_block_size(t);
  for (Shape s : {Shape{2, bs, 1}, Shape{3, bs, 5}, Shape{4, 512, 4}, Shape{6, 256 * 3, 8}, Shape{9, 4096 + 256, 13},
                  Shape{64, 1024, 1}, Shape{2, 256, 7}})
    v.push_back(s);
  return v;
}

TEST(QuantMatmul, Avx512IsBitIdenticalToScalarAndAvx2) {
  if (!has_vnni_path()) GTEST_SKIP() << kNoVnni;
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ThreadPool pool(2);
  for (GgmlType type : kQuantTypes) {
    for (const Shape& s : avx512_shapes_for(type)) {
      Problem p = make_problem(type, s.N, s.K, s.T, &rng);
      const std::vector<float> v512 = run(p, quant_matmul_avx512, &pool);
      expect_bit_identical(p, run(p, quant_matmul_scalar, nullptr), v512, "scalar vs avx512");
      expect_bit_identical(p, run(p, quant_matmul_avx2, nullptr), v512, "avx2 vs avx512");
    }
  }
}

// Large-magnitude codes stress the integer paths: all-extreme weights (q8_0 -128 included, q4_0
// nibbles 0 and 15, k-quant codes and scales at their maxima) against activations of +-127.
TEST(QuantMatmul, Avx512ExtremeCodesAreExact) {
  if (!has_vnni_path()) GTEST_SKIP() << kNoVnni;
  std::mt19937 rng(fresh_seed());
  for (GgmlType type : kQuantTypes) {
    const int64_t N = 5, K = 512, T = 2;
    Problem p = make_problem(type, N, K, T, &rng);
    const size_t row_bytes = ggml_row_bytes(type, K);
    // Random bytes everywhere except the f16 scales (kept finite: random bits could be NaN).
    std::vector<uint8_t> keep(row_bytes * size_t(N));
    std::memcpy(keep.data(), p.w->data(), keep.size());
    for (size_t i = 0; i < keep.size(); ++i) p.w->data()[i] = uint8_t(rng());
    for (int64_t n = 0; n < N; ++n) {
      uint8_t* row = p.w->data() + size_t(n) * row_bytes;
      const uint8_t* orig = keep.data() + size_t(n) * row_bytes;
      const size_t block = ggml_row_bytes(type, ggml_block_size(type));
      for (size_t off = 0; off < row_bytes; off += block) {
        if (type == GgmlType::kQ6_K) {
          std::memcpy(row + off + 208, orig + off + 208, 2);
        } else if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K) {
          std::memcpy(row + off, orig + off, 4);
        } else {
          std::memcpy(row + off, orig + off, 2);
        }
      }
      if (n == 0) {  // the extremes: every code byte saturated
        for (size_t off = 0; off < row_bytes; off += block) {
          const size_t first = type == GgmlType::kQ6_K ? 0 : (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K) ? 4 : 2;
          const size_t last = type == GgmlType::kQ6_K ? 208 : block;
          std::memset(row + off + first, type == GgmlType::kQ8_0 ? 0x80 : 0xFF, last - first);
        }
      }
    }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) p.x[size_t(t * p.ldx + k)] = (k + t) % 3 == 0 ? -1.0f : 1.0f;
    expect_bit_identical(p, run(p, quant_matmul_scalar, nullptr), run(p, quant_matmul_avx512, nullptr),
                         "scalar vs avx512, extreme codes");
  }
}

// The grouped expert matmul runs each (expert, block of rows) task on a row slice: whatever the
// slicing and the kernel path this CPU takes, every output equals the scalar product of the
// whole expert matrix with that expert's rows of x.
TEST(QuantMatmul, GroupedExpertsAreTheScalarBits) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  CpuBackend backend(2);
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    // 4 experts (one with no rows); 75 rows of K = 4096: several 64 KiB tasks per expert, the
    // last one odd-sized.
    const int64_t n_experts = 4, N = 75, K = 4096;
    const std::vector<int32_t> begin = {0, 3, 3, 8, 9};
    const int64_t rows = begin.back();
    std::vector<Problem> experts;
    std::vector<Matrix> w;
    for (int64_t e = 0; e < n_experts; ++e) {
      experts.push_back(make_problem(type, N, K, 1, &rng));
      w.push_back(Matrix{*ggml_type_to_dtype(type), experts.back().w->data(), N, K});
    }
    std::normal_distribution<float> g(0, 1);
    std::vector<float> x(size_t(rows * K)), y(size_t(rows * N), -1.0f), ref(size_t(rows * N), -2.0f);
    for (auto& v : x) v = g(rng);
    MoeRouting r;
    r.rows = rows, r.k = 1, r.n_experts = n_experts, r.expert_begin = begin.data();
    const GroupedMatmul job{w.data(), x.data(), K, y.data(), N};
    backend.grouped_matmul(r, &job, 1);
    for (int64_t e = 0; e < n_experts; ++e) {
      const int64_t n = begin[size_t(e + 1)] - begin[size_t(e)];
      if (n > 0)
        quant_matmul_scalar(type, w[size_t(e)].data, N, K, x.data() + begin[size_t(e)] * K, K, n,
                            ref.data() + begin[size_t(e)] * N, N, nullptr);
    }
    EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0) << ggml_type_name(type);
  }
}

// Several grouped jobs at once, as a MoE step issues them: the grouped path quantizes each job's
// activation rows once and shares them with a later job that reads the same rows for the same
// activation type (gate and up), but not across activation types (q8_0 vs q8_K) or different x.
// Every output must still be the scalar product of that job's expert matrix with its own x. 40
// rows (more than one quantization chunk, so the chunks spread over the pool), ldx > K.
TEST(QuantMatmul, GroupedJobsShareQuantizedActivationsOnlyWhereAlike) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  CpuBackend backend(2);
  const int64_t n_experts = 3, N = 41, K = 512, ldx = K + 7;
  const std::vector<int32_t> begin = {0, 17, 17, 40};
  const int64_t rows = begin.back();
  const GgmlType types[] = {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ8_0, GgmlType::kQ6_K};
  std::normal_distribution<float> g(0, 1);
  std::vector<float> x1(size_t(rows * ldx)), x2(size_t(rows * ldx));
  for (auto& v : x1) v = g(rng);
  for (auto& v : x2) v = g(rng) * 3.0f;
  std::vector<Problem> owners;  // keep the weights alive
  std::vector<std::vector<Matrix>> w(4);
  std::vector<std::vector<float>> y(4, std::vector<float>(size_t(rows * N), -1.0f));
  std::vector<GroupedMatmul> jobs;
  for (int j = 0; j < 4; ++j) {
    for (int64_t e = 0; e < n_experts; ++e) {
      owners.push_back(make_problem(types[j], N, K, 1, &rng));
      w[size_t(j)].push_back(Matrix{*ggml_type_to_dtype(types[j]), owners.back().w->data(), N, K});
    }
  }
  for (int j = 0; j < 4; ++j)
    jobs.push_back(GroupedMatmul{w[size_t(j)].data(), j == 3 ? x2.data() : x1.data(), ldx, y[size_t(j)].data(), N});
  MoeRouting r;
  r.rows = rows, r.k = 1, r.n_experts = n_experts, r.expert_begin = begin.data();
  backend.grouped_matmul(r, jobs.data(), int64_t(jobs.size()));
  for (int j = 0; j < 4; ++j) {
    std::vector<float> ref(size_t(rows * N), -2.0f);
    for (int64_t e = 0; e < n_experts; ++e) {
      const int64_t n = begin[size_t(e + 1)] - begin[size_t(e)];
      if (n > 0)
        quant_matmul_scalar(types[j], w[size_t(j)][size_t(e)].data, N, K, jobs[size_t(j)].x + begin[size_t(e)] * ldx,
                            ldx, n, ref.data() + begin[size_t(e)] * N, N, nullptr);
    }
    EXPECT_EQ(std::memcmp(y[size_t(j)].data(), ref.data(), ref.size() * 4), 0) << "job " << j << " "
                                                                               << ggml_type_name(types[j]);
  }
}

// The two-step product (activations quantized ahead, then multiplied) is quant_matmul's bits.
TEST(QuantMatmul, PrequantizedActivationsGiveTheSameBits) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ThreadPool pool(2);
  for (GgmlType type : kQuantTypes) {
    for (const Shape& s : shapes_for(type)) {
      const Problem p = make_problem(type, s.N, s.K, s.T, &rng);
      const size_t xb = quant_activation_row_bytes(type, p.K);
      std::vector<uint8_t> xq(xb * size_t(p.T));
      quantize_activation_rows(type, p.x.data(), p.ldx, p.T, p.K, xq.data());
      std::vector<float> two_step(size_t(p.T * p.ldo), -12345.0f);
      quant_matmul_quantized(type, p.w->data(), p.N, p.K, xq.data(), p.T, two_step.data(), p.ldo, &pool);
      expect_bit_identical(p, run(p, quant_matmul, &pool), two_step, "quantized ahead vs quant_matmul");
      expect_bit_identical(p, run(p, quant_matmul_scalar, nullptr), two_step, "quantized ahead vs scalar");
    }
  }
}

// The AVX2 activation quantizers write the scalar ones' bytes for any input: random scales,
// exact halves (ties to even), a zero block, NaN, +-inf, values of equal magnitude and opposite
// sign (the first one sets the q8_K scale's sign), denormals.
TEST(QuantMatmul, Avx2ActivationsAreTheScalarBytes) {
  if (!cpu_features().has_avx2_fma_f16c()) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> g(0, 1);
  const int64_t K = 256 * 9;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> x(static_cast<size_t>(K));
    for (int64_t b = 0; b < K / 32; ++b) {
      const float scale = std::pow(10.0f, std::uniform_real_distribution<float>(-6, 6)(rng));
      for (int64_t i = 0; i < 32; ++i) x[size_t(b * 32 + i)] = g(rng) * scale;
    }
    for (int64_t i = 0; i < 32; ++i) x[size_t(32 + i)] = float(i % 2 ? -(i + 0.5) : (i + 0.5));  // ties
    x[32 + 31] = 127.0f;
    for (int64_t i = 256; i < 512; ++i) x[size_t(i)] = 0.0f;                                      // zero block
    x[600] = std::nanf("");
    x[900] = trial % 2 ? INFINITY : -INFINITY;
    x[1100] = 3.0f, x[1101] = -3.0f, x[1102] = 2.0f;                                               // equal magnitudes
    for (int64_t i = 1280; i < 1536; ++i) x[size_t(i)] = 1e-40f * float(i - 1400);               // denormals
    x[1280 + 77] = -1e-40f * 200.0f;
    for (GgmlType wt : {GgmlType::kQ8_0, GgmlType::kQ4_K}) {
      std::vector<uint8_t> a(ggml_row_bytes(activation_type(wt), K)), b(a.size());
      quantize_activations(wt, x.data(), K, a.data());
      quantize_activations_avx2(wt, x.data(), K, b.data());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << ggml_type_name(activation_type(wt)) << " trial " << trial;
    }
  }
}

TEST(QuantMatmul, BatchAndThreadCountDoNotChangeAnyBit) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (GgmlType type : kQuantTypes) {
    for (Fn fn : {quant_matmul_scalar, quant_matmul}) {
      // Enough rows for several tasks both in decode (>= 64 KiB tasks) and prefill (16 rows).
      Problem p = make_problem(type, 97, 4096 + 256, 6, &rng);
      const std::vector<float> base = run(p, fn, nullptr);
      expect_bit_identical(p, base, run(p, fn, &pool1), "1 thread");
      expect_bit_identical(p, base, run(p, fn, &pool2), "2 threads");
      expect_bit_identical(p, base, run(p, fn, &pool3), "3 threads");
      // Each token alone (T = 1, the decode path) gives the bits of its row in the batch.
      for (int64_t t = 0; t < p.T; ++t) {
        std::vector<float> one(size_t(p.N));
        fn(type, p.w->data(), p.N, p.K, p.x.data() + t * p.ldx, p.ldx, 1, one.data(), p.N, &pool2);
        for (int64_t n = 0; n < p.N; ++n) {
          const float a = one[size_t(n)], b = base[size_t(t * p.ldo + n)];
          ASSERT_EQ(std::memcmp(&a, &b, 4), 0)
              << ggml_type_name(type) << " t=" << t << " n=" << n << ": " << a << " vs " << b;
        }
      }
    }
  }
}

TEST(QuantMatmul, PlainTypesGoToMatmul) {
  std::mt19937 rng(fresh_seed());
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t N = 9, K = 40, T = 2;
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    std::vector<float> wf(size_t(N * K)), x(size_t(T * K));
    for (auto& v : wf) v = u(rng);
    for (auto& v : x) v = u(rng);
    std::vector<uint8_t> w(ggml_row_bytes(type, K) * size_t(N));
    quantize_row(type, wf.data(), w.data(), N * K);
    std::vector<float> a(size_t(T * N)), b(size_t(T * N));
    quant_matmul(type, w.data(), N, K, x.data(), K, T, a.data(), N, nullptr);
    matmul(*ggml_type_to_dtype(type), w.data(), N, K, x.data(), K, T, b.data(), N, nullptr);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << ggml_type_name(type);
  }
}

}  // namespace
}  // namespace weft
