// expf_twin.h: which exp runs (the widest vector twin this CPU has, once it has been shown to
// reproduce this process's std::exp; std::exp otherwise), and that check.
#include "kernels/cpu/expf_twin.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"

namespace weft {

namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// ~1.7 M inputs: every 4096th bit pattern (all exponents, both signs, NaNs and infinities), the
// floats of [-2, -0] on a stride of 1723 patterns (where most softmax inputs fall), and 64
// patterns either side of each edge of glibc's special cases.
std::vector<float> check_inputs() {
  std::vector<float> x;
  x.reserve(1 << 21);
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4096) x.push_back(from_bits(uint32_t(b) | 0x5a5));
  for (uint32_t b = 0x80000000u; b <= 0xc0000000u; b += 1723) x.push_back(from_bits(b));
  for (float e : {88.0f, -88.0f, 0x1.62e42ep6f, -0x1.9fe368p6f, -0x1.9d1d9ep6f, 0.0f, -0.0f}) {
    uint32_t u;
    std::memcpy(&u, &e, 4);
    for (int d = -64; d <= 64; ++d) x.push_back(from_bits(u + uint32_t(d)));
  }
  return x;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

bool matches(void (*twin)(const float*, float*, int64_t)) {
  const std::vector<float> x = check_inputs();
  std::vector<float> y(x.size());
  twin(x.data(), y.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    if (!same_bits(y[i], std::exp(x[i]))) return false;
  return true;
}

enum class Path { kScalar, kAvx2, kAvx512 };

Path chosen_path() {
  static const Path path = [] {
    if (use_avx512() && matches(expf_twin_avx512)) return Path::kAvx512;
    if (use_avx2() && matches(expf_twin_avx2)) return Path::kAvx2;
    return Path::kScalar;
  }();
  return path;
}

}  // namespace

bool expf_twin_matches_libm() { return chosen_path() != Path::kScalar; }

void exp_sub_inplace_scalar(float* s, int64_t n, float m) {
  for (int64_t j = 0; j < n; ++j) s[j] = std::exp(s[j] - m);
}

void exp_sub_inplace(float* s, int64_t n, float m) {
  switch (chosen_path()) {
    case Path::kAvx512: exp_sub_avx512(s, n, m); break;
    case Path::kAvx2: exp_sub_avx2(s, n, m); break;
    default: exp_sub_inplace_scalar(s, n, m); break;
  }
}

void silu_inplace(float* x, int64_t n) {
  // exp(-x) a block at a time (the twin: libm's bits), then silu's own division.
  constexpr int64_t kBlock = 256;
  alignas(64) float e[kBlock];
  const Path path = chosen_path();
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t nb = std::min(kBlock, n - i0);
    for (int64_t j = 0; j < nb; ++j) e[j] = -x[i0 + j];
    switch (path) {
      case Path::kAvx512: expf_twin_avx512(e, e, nb); break;
      case Path::kAvx2: expf_twin_avx2(e, e, nb); break;
      default: for (int64_t j = 0; j < nb; ++j) e[j] = std::exp(e[j]); break;
    }
    for (int64_t j = 0; j < nb; ++j) x[i0 + j] = x[i0 + j] / (1.0f + e[j]);
  }
}

}  // namespace weft
