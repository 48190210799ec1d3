#include "kernels/cpu/gdn.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/expf_twin.h"
#include "kernels/cpu/ops.h"

namespace weft {

void causal_conv1d_silu_channels(float* x, int64_t T, int64_t channels, const float* w, int64_t kernel, float* state,
                                 int64_t c0, int64_t c1) {
  const int64_t hist = kernel - 1, width = c1 - c0;
  // window[i][c - c0] = input of channel c at time (t - hist + i); rows 0..hist-1 come from state,
  // then x (copied first: x is overwritten in place). Reused per thread: this runs for every GDN
  // layer of every token.
  thread_local std::vector<float> window;
  window.resize(size_t((hist + T) * width));
  for (int64_t i = 0; i < hist; ++i)
    std::memcpy(window.data() + i * width, state + i * channels + c0, size_t(width) * sizeof(float));
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(window.data() + (hist + t) * width, x + t * channels + c0, size_t(width) * sizeof(float));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = c0; c < c1; ++c) {
      float s = 0;
      for (int64_t j = 0; j < kernel; ++j) s += w[c * kernel + j] * window[size_t((t + j) * width + (c - c0))];
      x[t * channels + c] = s;
    }
    silu_inplace(x + t * channels + c0, width);  // ops.h's silu, exps through the expf twin
  }
  for (int64_t i = 0; i < hist; ++i)
    std::memcpy(state + i * channels + c0, window.data() + (T + i) * width, size_t(width) * sizeof(float));
}

void causal_conv1d_silu(float* x, int64_t T, int64_t channels, const float* w, int64_t kernel, float* state) {
  causal_conv1d_silu_channels(x, T, channels, w, kernel, state, 0, channels);
}

void gdn_recurrent_scalar(const GdnRecurrentArgs& a, ThreadPool* pool) {
  const int64_t ratio = a.n_v / a.n_k, dk = a.dk, dv = a.dv;
  auto head = [&](int64_t j) {
    float* S = a.state + j * dk * dv;
    const int64_t kh = j / ratio;
    thread_local std::vector<float> kv, delta;  // per worker thread, reused across calls
    kv.resize(size_t(dv));
    delta.resize(size_t(dv));
    for (int64_t t = 0; t < a.T; ++t) {
      const float* q = a.q + t * a.q_stride + kh * dk;
      const float* k = a.k + t * a.q_stride + kh * dk;
      const float* v = a.v + t * a.v_stride + j * dv;
      const float decay = std::exp(a.g[t * a.n_v + j]);
      const float beta = a.beta[t * a.n_v + j];
      std::fill(kv.begin(), kv.end(), 0.0f);
      for (int64_t r = 0; r < dk; ++r) {
        float* Sr = S + r * dv;
        const float kr = k[r];
        for (int64_t c = 0; c < dv; ++c) {
          Sr[c] *= decay;
          kv[size_t(c)] += Sr[c] * kr;
        }
      }
      for (int64_t c = 0; c < dv; ++c) delta[size_t(c)] = (v[c] - kv[size_t(c)]) * beta;
      float* out = a.out + (t * a.n_v + j) * dv;
      std::fill(out, out + dv, 0.0f);
      for (int64_t r = 0; r < dk; ++r) {
        float* Sr = S + r * dv;
        const float kr = k[r], qr = q[r];
        for (int64_t c = 0; c < dv; ++c) {
          Sr[c] += kr * delta[size_t(c)];
          out[c] += Sr[c] * qr;
        }
      }
    }
  };
  if (pool) pool->parallel_for(a.n_v, head, Schedule::kRanges);  // heads' states are consecutive
  else for (int64_t j = 0; j < a.n_v; ++j) head(j);
}

void gdn_recurrent(const GdnRecurrentArgs& a, ThreadPool* pool) {
  if (use_avx2()) gdn_recurrent_avx2(a, pool);
  else gdn_recurrent_scalar(a, pool);
}

}  // namespace weft
