// AVX2 path of the token-by-token gated delta rule (gdn_recurrent), bit-identical to the scalar
// code in gdn.cpp: the same multiplies and adds per element, in the same order, never fused.
// Speed comes from 8 columns per instruction and from walking the state in column blocks of 64:
// a block (dk x 64 floats, 32 KiB at dk = 128) is decayed and read for kv, then updated and read
// for the output while it is still in L1, so each token reads and writes the state once.
#include <immintrin.h>

#include <cmath>

#include "core/thread_pool.h"
#include "kernels/cpu/gdn.h"

// The scalar twin rounds the product and the sum separately; keep them separate here too.
#pragma GCC optimize("fp-contract=off")
#ifdef __clang__
#pragma clang fp contract(off)  // clang ignores the GCC pragma above and contracts by default
#endif

namespace weft {

namespace {

// Columns [c0, c0 + 8·NB) of one token's update of one head.
template <int NB>
inline void update_block(float* S, int64_t dk, int64_t dv, int64_t c0, const float* q, const float* k,
                         const float* v, float decay, float beta, float* out) {
  const __m256 vdecay = _mm256_set1_ps(decay), vbeta = _mm256_set1_ps(beta);
  __m256 acc[NB];
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b) acc[b] = _mm256_setzero_ps();
  for (int64_t r = 0; r < dk; ++r) {
    float* Sr = S + r * dv + c0;
    const __m256 kr = _mm256_set1_ps(k[r]);
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) {
      const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(Sr + 8 * b), vdecay);
      _mm256_storeu_ps(Sr + 8 * b, s);
      acc[b] = _mm256_add_ps(acc[b], _mm256_mul_ps(s, kr));
    }
  }
  __m256 delta[NB];
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b) {
    delta[b] = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + c0 + 8 * b), acc[b]), vbeta);
    acc[b] = _mm256_setzero_ps();
  }
  for (int64_t r = 0; r < dk; ++r) {
    float* Sr = S + r * dv + c0;
    const __m256 kr = _mm256_set1_ps(k[r]), qr = _mm256_set1_ps(q[r]);
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) {
      const __m256 s = _mm256_add_ps(_mm256_loadu_ps(Sr + 8 * b), _mm256_mul_ps(kr, delta[b]));
      _mm256_storeu_ps(Sr + 8 * b, s);
      acc[b] = _mm256_add_ps(acc[b], _mm256_mul_ps(s, qr));
    }
  }
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(out + c0 + 8 * b, acc[b]);
}

// Columns that do not fill a vector, one at a time, as gdn.cpp does.
void update_columns(float* S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, const float* q, const float* k,
                    const float* v, float decay, float beta, float* out) {
  for (int64_t c = c0; c < c1; ++c) {
    float kv = 0.0f;
    for (int64_t r = 0; r < dk; ++r) {
      S[r * dv + c] *= decay;
      kv += S[r * dv + c] * k[r];
    }
    const float delta = (v[c] - kv) * beta;
    float o = 0.0f;
    for (int64_t r = 0; r < dk; ++r) {
      S[r * dv + c] += k[r] * delta;
      o += S[r * dv + c] * q[r];
    }
    out[c] = o;
  }
}

}  // namespace

void gdn_recurrent_avx2(const GdnRecurrentArgs& a, ThreadPool* pool) {
  const int64_t ratio = a.n_v / a.n_k, dk = a.dk, dv = a.dv;
  auto head = [&](int64_t j) {
    float* S = a.state + j * dk * dv;
    const int64_t kh = j / ratio;
    for (int64_t t = 0; t < a.T; ++t) {
      const float* q = a.q + t * a.q_stride + kh * dk;
      const float* k = a.k + t * a.q_stride + kh * dk;
      const float* v = a.v + t * a.v_stride + j * dv;
      const float decay = std::exp(a.g[t * a.n_v + j]);
      const float beta = a.beta[t * a.n_v + j];
      float* out = a.out + (t * a.n_v + j) * dv;
      int64_t c = 0;
      for (; c + 64 <= dv; c += 64) update_block<8>(S, dk, dv, c, q, k, v, decay, beta, out);
      for (; c + 8 <= dv; c += 8) update_block<1>(S, dk, dv, c, q, k, v, decay, beta, out);
      update_columns(S, dk, dv, c, dv, q, k, v, decay, beta, out);
    }
  };
  if (pool) pool->parallel_for(a.n_v, head, Schedule::kRanges);  // heads' states are consecutive
  else for (int64_t j = 0; j < a.n_v; ++j) head(j);
}

}  // namespace weft
