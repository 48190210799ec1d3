// HostWeightCopy: the CPU backend's huge-page copy of the weight matrices must hold exactly the
// source bytes at every address a kernel can be handed (matrix starts, rows inside, per-expert
// slices), keep each range's alignment, leave other addresses alone, never read the gaps
// between matrices (which may be unmapped), and be shared per model key only while the set is
// the same one.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "backend/cpu_backend.h"
#include "backend/host_weight_copy.h"
#include "core/quant_types.h"
#include "kernels/cpu/quant_blocks.h"

namespace weft {
namespace {

using test::CpuWeightsEnvGuard;

TEST(HostWeightCopy, CopiesEveryMatrixByteAndSkipsUnmappedGaps) {
  CpuWeightsEnvGuard env;
  unsetenv("WEFT_CPU_WEIGHTS");
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  // Three pages; the middle one unmapped: two matrices closer than the merge gap, a hole between.
  auto* base = static_cast<uint8_t*>(mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(base, MAP_FAILED);
  std::mt19937 rng(std::random_device{}());
  for (size_t i = 0; i < 3 * page; ++i) base[i] = uint8_t(rng());
  ASSERT_EQ(munmap(base + page, page), 0);
  // Plus a heap matrix far away and two overlapping views of it (an expert slice, a tied head).
  std::vector<uint8_t> heap(3 * 4096 + 77);
  for (auto& b : heap) b = uint8_t(rng());
  const int64_t cols = 4096 / 2;  // bf16 rows of 4 KiB
  WeightSet set;
  set.matrices.push_back(Matrix{DType::kBF16, base + 100, 1, 64});          // 128 bytes in page 0
  set.matrices.push_back(Matrix{DType::kBF16, base + 2 * page + 6, 2, 32}); // in page 2
  set.matrices.push_back(Matrix{DType::kBF16, heap.data() + 77, 3, cols});
  set.matrices.push_back(Matrix{DType::kBF16, heap.data() + 77 + 4096, 2, cols});
  std::string why;
  const int key = 0;
  auto copy = HostWeightCopy::shared(&key, set, &why);
  if (!copy) GTEST_SKIP() << "no copy on this machine: " << why;
  for (const Matrix& m : set.matrices) {
    const auto* src = static_cast<const uint8_t*>(m.data);
    const auto* dst = static_cast<const uint8_t*>(copy->translate(m.data));
    EXPECT_NE(src, dst);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(src) % 64, reinterpret_cast<uintptr_t>(dst) % 64);
    EXPECT_EQ(std::memcmp(src, dst, m.bytes()), 0);
    // An address inside (a row, an expert slice) maps into the same copy.
    const auto* last = src + m.bytes() - 1;
    EXPECT_EQ(static_cast<const uint8_t*>(copy->translate(last)), dst + m.bytes() - 1);
  }
  int other = 0;
  EXPECT_EQ(copy->translate(&other), &other);
  EXPECT_EQ(copy->translate(nullptr), nullptr);
  // Shared while held and the set is the same; a different set under the same key is copied anew.
  EXPECT_EQ(HostWeightCopy::shared(&key, set, &why), copy);
  WeightSet fewer = set;
  fewer.matrices.pop_back();
  auto again = HostWeightCopy::shared(&key, fewer, &why);
  ASSERT_NE(again, nullptr);
  EXPECT_NE(again, copy);
  munmap(base, page);
  munmap(base + 2 * page, page);
}

TEST(HostWeightCopy, MmapModeReadsInPlace) {
  CpuWeightsEnvGuard env;
  setenv("WEFT_CPU_WEIGHTS", "mmap", 1);
  std::vector<uint8_t> w(4096, 1);
  WeightSet set;
  set.matrices.push_back(Matrix{DType::kBF16, w.data(), 1, 2048});
  std::string why;
  const int key = 0;
  EXPECT_EQ(HostWeightCopy::shared(&key, set, &why), nullptr);
  EXPECT_FALSE(host_weight_copy_enabled());
  setenv("WEFT_CPU_WEIGHTS", "copy", 1);
  EXPECT_TRUE(host_weight_copy_enabled());
}

// A backend that bound the weights computes from the copy, with the same bits as one reading in
// place (q4_K: a block type; rows and a row slice).
TEST(HostWeightCopy, BoundBackendGivesTheSameBits) {
  CpuWeightsEnvGuard env;
  unsetenv("WEFT_CPU_WEIGHTS");
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> g(0, 1);
  const int64_t N = 37, K = 512;
  const size_t row_bytes = ggml_row_bytes(GgmlType::kQ4_K, K);
  std::vector<uint8_t> w(row_bytes * N);
  std::vector<float> row(K), x(K);
  for (int64_t n = 0; n < N; ++n) {
    for (auto& v : row) v = g(rng);
    quantize_row(GgmlType::kQ4_K, row.data(), w.data() + n * row_bytes, K);
  }
  for (auto& v : x) v = g(rng);
  const Matrix m{*ggml_type_to_dtype(GgmlType::kQ4_K), w.data(), N, K};
  WeightSet set;
  set.matrices.push_back(m);
  CpuBackend bound(1), in_place(1);
  const int key = 0;
  EXPECT_FALSE(bound.has_weights(&key));
  ASSERT_TRUE(bound.bind_weights(&key, set).ok());
  EXPECT_TRUE(bound.has_weights(&key));
  std::vector<float> a(N), b(N);
  bound.matmul(m, x.data(), 1, a.data());
  in_place.matmul(m, x.data(), 1, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  bound.matmul(m.row_slice(5, 9), x.data(), 1, a.data());
  in_place.matmul(m.row_slice(5, 9), x.data(), 1, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 9 * 4), 0);
  // Binding another model replaces the first (one model at a time, as the CUDA backend).
  std::vector<uint8_t> w2(w);
  WeightSet other;
  other.matrices.push_back(Matrix{m.dtype, w2.data(), N, K});
  const int key2 = 0;
  ASSERT_TRUE(bound.bind_weights(&key2, other).ok());
  EXPECT_TRUE(bound.has_weights(&key2));
  EXPECT_FALSE(bound.has_weights(&key));
  bound.matmul(other.matrices[0], x.data(), 1, a.data());
  in_place.matmul(m, x.data(), 1, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

// A report says where the weights sit: nothing before binding; after it, the copy with its share
// on 2 MiB pages as the kernel reports it (/proc/self/smaps), or the mapped file and why.
TEST(HostWeightCopy, BackendSaysWhereTheWeightsAre) {
  CpuWeightsEnvGuard env;
  unsetenv("WEFT_CPU_WEIGHTS");
  const size_t bytes = size_t(6) << 20;  // three huge pages' worth, so some can be huge
  std::vector<uint8_t> w(bytes, 3);
  WeightSet set;
  set.matrices.push_back(Matrix{DType::kBF16, w.data(), int64_t(bytes / 4096), 2048});
  CpuBackend be(1);
  EXPECT_EQ(be.weights_where(), "");
  const int key = 0;
  ASSERT_TRUE(be.bind_weights(&key, set).ok());
  const std::string where = be.weights_where();
  std::string why;
  auto copy = HostWeightCopy::shared(&key, set, &why);
  if (!copy) {
    EXPECT_NE(where.find("memory-mapped file"), std::string::npos) << where;
    return;
  }
  EXPECT_NE(where.find("huge-page copy, 6 MiB"), std::string::npos) << where;
  if (copy->huge_bytes() != SIZE_MAX) {
    EXPECT_LE(copy->huge_bytes(), size_t(8) << 20);  // the aligned mapping, at most
    EXPECT_EQ(copy->huge_bytes() % (size_t(2) << 20), 0u);
    EXPECT_NE(where.find("on 2 MiB pages"), std::string::npos) << where;
  }
  CpuWeightsEnvGuard env2;
  setenv("WEFT_CPU_WEIGHTS", "mmap", 1);
  CpuBackend in_place(1);
  const int key2 = 0;
  ASSERT_TRUE(in_place.bind_weights(&key2, set).ok());
  EXPECT_NE(in_place.weights_where().find("memory-mapped file"), std::string::npos) << in_place.weights_where();
}

}  // namespace
}  // namespace weft
