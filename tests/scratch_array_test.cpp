// ScratchArray (core/scratch_array.h) keeps std::vector::resize's contract for the CPU backend's
// scratch: contents survive growth, new elements read zero, small and huge sizes alike.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/scratch_array.h"

namespace weft {
namespace {

TEST(ScratchArray, GrowthKeepsContentsAndNewElementsAreZero) {
  ScratchArray a;
  EXPECT_EQ(a.size(), 0u);
  // From a few floats (ordinary pages) past 2 MiB (huge-page mapping) and back to a request that
  // fits: every written value survives every growth, every never-written one reads 0.
  const size_t sizes[] = {1, 100, 1000, 5000, size_t(1) << 19, (size_t(1) << 19) + 3, size_t(3) << 20, 7, size_t(3) << 20};
  size_t written = 0;
  for (size_t n : sizes) {
    float* p = a.resize(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << "not cache-line aligned at " << n;
    EXPECT_GE(a.size(), n);
    for (size_t i = 0; i < written && i < n; ++i) ASSERT_EQ(p[i], float(i % 1000) + 0.5f) << "lost at " << i;
    for (size_t i = written; i < n; ++i) ASSERT_EQ(p[i], 0.0f) << "not zero at " << i << " of " << n;
    for (size_t i = written; i < n; ++i) p[i] = float(i % 1000) + 0.5f;
    if (n > written) written = n;
  }
}

TEST(ScratchArray, ShrinkingRequestsKeepTheArray) {
  ScratchArray a;
  float* p = a.resize(1 << 20);
  p[123] = 4.0f;
  EXPECT_EQ(a.resize(10), p);
  EXPECT_EQ(a.resize(1 << 20), p);
  EXPECT_EQ(p[123], 4.0f);
}

TEST(ScratchArray, AnImpossibleSizeThrowsBadAlloc) {
  ScratchArray a;
  EXPECT_THROW(a.resize(SIZE_MAX / 2), std::bad_alloc);
  EXPECT_EQ(a.size(), 0u);
}

}  // namespace
}  // namespace weft
