#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/expf_twin.h"

namespace weft {

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps, bool plus_one) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * (plus_one ? 1.0f + w[i] : w[i]);
}

void rmsnorm_gated(const float* x, const float* z, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  // silu(z) a block at a time through the expf twin (the bits of ops.h's silu).
  constexpr int64_t kBlock = 256;
  alignas(64) float sz[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t nb = std::min(kBlock, n - i0);
    std::memcpy(sz, z + i0, size_t(nb) * sizeof(float));
    silu_inplace(sz, nb);
    for (int64_t j = 0; j < nb; ++j) y[i0 + j] = w[i0 + j] * (x[i0 + j] * inv) * sz[j];
  }
}

void l2norm(float* x, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const float inv = float(1.0 / std::sqrt(ss + double(eps)));
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void rope_rotate_half(float* x, const float* cos, const float* sin, int64_t rotary_dim) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float softplusf(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  // silu through the expf twin (expf_twin.h: libm's bits, 8 or 16 exps at a time), a block at a
  // time so the gate stays in L1 between the two passes; the same bits as silu(gate[i]) * up[i].
  constexpr int64_t kBlock = 256;
  alignas(64) float g[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t nb = std::min(kBlock, n - i0);
    std::memcpy(g, gate + i0, size_t(nb) * sizeof(float));
    silu_inplace(g, nb);
    for (int64_t j = 0; j < nb; ++j) out[i0 + j] = g[j] * up[i0 + j];
  }
}

void softmax(float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::fmax(m, x[i]);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  const float inv = float(1.0 / s);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace weft
