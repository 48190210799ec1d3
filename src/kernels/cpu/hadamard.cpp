// Scalar in-place fast Walsh–Hadamard transform (see hadamard.h).
#include "kernels/cpu/hadamard.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace weft {

void fwht(float* x, int64_t n) {
  if (!fwht_size_ok(n)) {  // callers check first; anything else would write out of bounds
    std::fprintf(stderr, "weft: fwht called with n = %lld (not a power of two)\n", (long long)n);
    std::abort();
  }
  // Butterflies of doubling span; each stage is exact up to one float rounding per output.
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  // One scale at the end (not 1/sqrt(2) per stage): fewer roundings, and for n = 4^k it is a
  // power of two, i.e. exact.
  const float s = float(1.0 / std::sqrt(double(n)));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void fwht_rows(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) fwht(x + r * n, n);
}

}  // namespace weft
