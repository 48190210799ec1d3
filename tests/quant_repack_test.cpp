// The x8 repack of q4_K, q5_K, q6_K and q8_0 (kernels/cpu/quant_repack.h): lossless both ways on any bytes, and every
// kernel path over the grouped layout gives the plain layout's scalar bits (decode and prefill
// token counts, odd row counts with a plain tail, row tasks on a pool, extreme codes); the CPU
// backend's repacked huge-page copy gives the in-place bits through matmul, row slices, the
// grouped expert path and the embedding lookup.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "backend/cpu_backend.h"
#include "backend/host_weight_copy.h"
#include "core/cpu_features.h"
#include "core/quant_types.h"
#include "core/thread_pool.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_repack.h"

namespace weft {
namespace {

using test::fresh_seed;
using test::CpuWeightsEnvGuard;

constexpr GgmlType kQ4K = GgmlType::kQ4_K;

// N rows of K q4_K columns: quantized Gaussian rows, or (extreme) random bytes with finite f16
// scales and, for row 0, every code nibble 15 and every 6-bit scale and min 63 (q8_0: every code
// -128; q6_K: every code 63, every scale -128).
std::vector<uint8_t> make_rows(GgmlType type, int64_t N, int64_t K, bool extreme, std::mt19937* rng) {
  const size_t row_bytes = ggml_row_bytes(type, K);
  // Bytes that hold codes / scales (not the f16 scales, which random bits could make NaN): after
  // them for q8_0 (d), q4_K / q5_K (d, dmin), before them for q6_K (d last).
  const bool q8 = type == GgmlType::kQ8_0, q6 = type == GgmlType::kQ6_K;
  const size_t block = ggml_row_bytes(type, ggml_block_size(type));
  const size_t first = q8 ? 2 : q6 ? 0 : 4, last = q6 ? block - 2 : block;
  std::vector<uint8_t> w(row_bytes * size_t(N));
  std::normal_distribution<float> g(0, 1);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    for (auto& v : row) v = g(*rng);
    quantize_row(type, row.data(), w.data() + size_t(n) * row_bytes, K);
    if (!extreme) continue;
    for (size_t off = 0; off < row_bytes; off += block) {
      uint8_t* blk = w.data() + size_t(n) * row_bytes + off;
      for (size_t i = first; i < last; ++i) blk[i] = n == 0 ? (q8 || (q6 && i >= 192) ? 0x80 : 0xFF) : uint8_t((*rng)());
    }
  }
  return w;
}

std::vector<uint8_t> repacked(GgmlType type, const std::vector<uint8_t>& w, int64_t N, int64_t K) {
  std::vector<uint8_t> r(w.size());
  repack_matrix_x8(type, w.data(), N, K, r.data());
  return r;
}

std::vector<float> activations(int64_t T, int64_t K, std::mt19937* rng) {
  std::normal_distribution<float> g(0, 1);
  std::vector<float> x(size_t(T * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = g(*rng) * (i % 97 == 0 ? 8.0f : 1.0f);
  return x;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0 && bad++ < 5) ADD_FAILURE() << what << ": [" << i << "] " << a[i] << " vs " << b[i];
  EXPECT_EQ(bad, 0) << what;
}

constexpr GgmlType kGroupedTypes[] = {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_0};

TEST(QuantRepack, RoundTripsEveryRowOnAnyBytes) {
  std::mt19937 rng(fresh_seed());
  for (GgmlType type : kGroupedTypes)
  for (int64_t K : {256, 512, 4096 + 256}) {
    const int64_t N = 21;  // two groups and a plain tail of 5
    const size_t row_bytes = ggml_row_bytes(type, K);
    std::vector<uint8_t> w(row_bytes * N);
    for (auto& b : w) b = uint8_t(rng());
    const std::vector<uint8_t> r = repacked(type, w, N, K);
    EXPECT_NE(std::memcmp(r.data(), w.data(), 16 * row_bytes), 0) << "the groups are rearranged";
    EXPECT_EQ(std::memcmp(r.data() + 16 * row_bytes, w.data() + 16 * row_bytes, 5 * row_bytes), 0) << "tail plain";
    std::vector<uint8_t> scratch(row_bytes);
    const QuantLayout layout{16};
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* row = quant_row_plain(type, r.data(), K, layout, n, scratch.data());
      EXPECT_EQ(std::memcmp(row, w.data() + size_t(n) * row_bytes, row_bytes), 0) << "row " << n << " K " << K;
    }
  }
}

using Fn = void (*)(GgmlType, const void*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                    ThreadPool*, const QuantLayout&);

TEST(QuantRepack, EveryPathOnGroupsGivesThePlainScalarBits) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ThreadPool pool2(2), pool3(3);
  struct Path {
    const char* name;
    Fn fn;
    bool available;
  };
  const Path paths[] = {{"scalar", quant_matmul_scalar_with_layout, true},
                        {"avx2", quant_matmul_avx2_with_layout, use_avx2()},
                        {"avx512", quant_matmul_avx512_with_layout, use_avx512_vnni()},
                        {"dispatch", quant_matmul_with_layout, true}};
  struct Shape {
    int64_t N, K, T;
  };
  for (GgmlType type : kGroupedTypes)
  for (bool extreme : {false, true}) {
    for (Shape s : {Shape{8, 256, 1}, Shape{13, 512, 1}, Shape{16, 256, 2}, Shape{37, 4096 + 256, 1},
                    Shape{24, 512, 3}, Shape{19, 768, 4}, Shape{40, 512, 9}, Shape{515, 2048, 1},
                    Shape{16, ggml_block_size(type), 1}, Shape{9, 3 * ggml_block_size(type), 2}}) {
      const std::vector<uint8_t> w = make_rows(type, s.N, s.K, extreme, &rng);
      const std::vector<uint8_t> r = repacked(type, w, s.N, s.K);
      const std::vector<float> x = activations(s.T, s.K, &rng);
      std::vector<float> ref(size_t(s.T * s.N));
      quant_matmul_scalar(type, w.data(), s.N, s.K, x.data(), s.K, s.T, ref.data(), s.N, nullptr);
      const QuantLayout layout{s.N / 8 * 8};
      for (const Path& p : paths) {
        if (!p.available) continue;
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          std::vector<float> out(ref.size(), -1.0f);
          p.fn(type, r.data(), s.N, s.K, x.data(), s.K, s.T, out.data(), s.N, tp, layout);
          expect_same_bits(ref, out, std::string(ggml_type_name(type)) + " " + p.name + (extreme ? " extreme" : "") + " N=" + std::to_string(s.N) +
                                         " K=" + std::to_string(s.K) + " T=" + std::to_string(s.T));
        }
      }
      // The pre-quantized entry (the grouped expert path's).
      std::vector<uint8_t> xq(size_t(s.T) * quant_activation_row_bytes(type, s.K));
      quantize_activation_rows(type, x.data(), s.K, s.T, s.K, xq.data());
      std::vector<float> out(ref.size(), -1.0f);
      quant_matmul_quantized(type, r.data(), s.N, s.K, xq.data(), s.T, out.data(), s.N, &pool3, layout);
      expect_same_bits(ref, out, "quantized entry N=" + std::to_string(s.N));
    }
  }
}

TEST(QuantRepack, BoundBackendGivesTheInPlaceBits) {
  CpuWeightsEnvGuard env;
  unsetenv("WEFT_CPU_WEIGHTS");
  if (!host_weight_repack_enabled()) GTEST_SKIP() << "no grouped q4_K kernel on this CPU (AVX-512 VNNI)";
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // A q4_K dense matrix with a tail (45 rows), a q4_K embedding table, and three q5_K experts cut
  // from one stacked tensor (75 rows each, K = 2048: several grouped-path blocks); the table twice (a
  // tied head).
  const int64_t K = 2048, N = 45, V = 19, E = 3, NE = 75;
  const size_t rb5 = ggml_row_bytes(GgmlType::kQ5_K, K);
  const std::vector<uint8_t> dense = make_rows(kQ4K, N, K, false, &rng), table = make_rows(kQ4K, V, K, false, &rng);
  const std::vector<uint8_t> stacked = make_rows(GgmlType::kQ5_K, E * NE, K, false, &rng);  // q5_K experts
  const int64_t NH = 27;  // a q6_K output head with a tail of 3
  const std::vector<uint8_t> head = make_rows(GgmlType::kQ6_K, NH, K, true, &rng);
  const DType dt = *ggml_type_to_dtype(kQ4K), dt5 = *ggml_type_to_dtype(GgmlType::kQ5_K);
  const Matrix md{dt, dense.data(), N, K}, mt{dt, table.data(), V, K};
  const Matrix mh{*ggml_type_to_dtype(GgmlType::kQ6_K), head.data(), NH, K};
  std::vector<Matrix> experts;
  for (int64_t e = 0; e < E; ++e) experts.push_back(Matrix{dt5, stacked.data() + size_t(e * NE) * rb5, NE, K});
  WeightSet set;
  set.matrices = {md, mt, mt, experts[0], experts[1], experts[2], mh};
  CpuBackend bound(2), in_place(2);
  const int key = 0;
  ASSERT_TRUE(bound.bind_weights(&key, set).ok());
  {
    std::string why;
    auto copy = HostWeightCopy::shared(&key, set, &why);
    ASSERT_NE(copy, nullptr) << why;
    EXPECT_EQ(copy->repacked_matrices(), 6u) << "dense, table (once), three experts and the head";
  }
  const int64_t T = 3;
  const std::vector<float> x = activations(T, K, &rng);
  auto both = [&](const Matrix& m, int64_t t, const char* what) {
    std::vector<float> a(size_t(t * m.rows), -1.0f), b(a.size(), -2.0f);
    bound.matmul(m, x.data(), t, a.data());
    in_place.matmul(m, x.data(), t, b.data());
    expect_same_bits(b, a, what);
  };
  both(md, 1, "dense T=1");
  both(md, T, "dense T=3");
  both(md.row_slice(8, 24), 1, "slice at a group");
  both(md.row_slice(40, 5), 1, "slice in the tail");
  both(md.row_slice(3, 9), 1, "slice cutting groups");
  both(md.row_slice(16, 29), 1, "slice to the end");
  both(mh, 1, "q6_K head T=1");
  both(mh, T, "q6_K head T=3");
  both(mh.row_slice(8, 19), 1, "q6_K slice to the end");
  std::vector<float> ea(size_t(4 * K)), eb(ea.size());
  const int32_t ids[4] = {0, 7, 8, 18};
  bound.embed(mt, ids, 4, ea.data());
  in_place.embed(mt, ids, 4, eb.data());
  expect_same_bits(eb, ea, "embedding rows");
  const std::vector<int32_t> begin = {0, 2, 2, 3};
  MoeRouting r;
  r.rows = 3, r.k = 1, r.n_experts = E, r.expert_begin = begin.data();
  std::vector<float> ya(size_t(3 * NE), -1.0f), yb(ya.size(), -2.0f);
  const GroupedMatmul ja{experts.data(), x.data(), K, ya.data(), NE}, jb{experts.data(), x.data(), K, yb.data(), NE};
  bound.grouped_matmul(r, &ja, 1);
  in_place.grouped_matmul(r, &jb, 1);
  expect_same_bits(yb, ya, "grouped experts");
}

// Views of one stacked tensor that overlap each other are never repacked: the repack of one would
// scramble the rows the other reads.
TEST(QuantRepack, OverlappingMatricesStayPlain) {
  CpuWeightsEnvGuard env;
  unsetenv("WEFT_CPU_WEIGHTS");
  if (!host_weight_repack_enabled()) GTEST_SKIP() << "no grouped q4_K kernel on this CPU (AVX-512 VNNI)";
  std::mt19937 rng(fresh_seed());
  const int64_t K = 256, NE = 16;
  const size_t rb = ggml_row_bytes(kQ4K, K);
  const std::vector<uint8_t> stacked = make_rows(kQ4K, 3 * NE, K, false, &rng);
  const DType dt = *ggml_type_to_dtype(kQ4K);
  WeightSet set;
  for (int64_t e = 0; e < 3; ++e) set.matrices.push_back(Matrix{dt, stacked.data() + size_t(e * NE) * rb, NE, K});
  set.matrices.push_back(Matrix{dt, stacked.data() + size_t(NE - 4) * rb, 8, K});  // rows 12..19: experts 0 and 1
  std::string why;
  const int key = 0;
  auto copy = HostWeightCopy::shared(&key, set, &why);
  if (!copy) GTEST_SKIP() << "no copy on this machine: " << why;
  EXPECT_EQ(copy->repacked_matrices(), 1u) << "only the third expert is alone";
  for (const Matrix& m : set.matrices) {
    const std::optional<QuantLayout> lay = copy->layout(m);
    ASSERT_TRUE(lay.has_value());
    const bool third = m.data == set.matrices[2].data;
    EXPECT_EQ(lay->grouped_rows, third ? NE : 0);
    if (!third) EXPECT_EQ(std::memcmp(copy->translate(m.data), m.data, m.bytes()), 0);
  }
}

}  // namespace
}  // namespace weft
