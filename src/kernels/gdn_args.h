// GdnRecurrentArgs: the operands of the gated delta-rule recurrence, the same for every backend.
#pragma once

#include <cstdint>

namespace weft {

struct GdnRecurrentArgs {
  float* state = nullptr;      // [n_v, dk, dv], updated in place
  const float* q = nullptr;    // token t, key head h at q[t * q_stride + h * dk] (l2-normalised, scaled)
  const float* k = nullptr;    // same layout as q (l2-normalised)
  const float* v = nullptr;    // token t, value head j at v[t * v_stride + j * dv]
  int64_t q_stride = 0, v_stride = 0;
  const float* g = nullptr;    // [T, n_v] log decay (g = −exp(A_log)·softplus(a + dt_bias))
  const float* beta = nullptr; // [T, n_v]
  float* out = nullptr;        // [T, n_v, dv]
  int64_t T = 0, n_k = 0, n_v = 0, dk = 0, dv = 0;
};

}  // namespace weft
