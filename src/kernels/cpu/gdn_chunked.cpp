// Chunked gated delta rule: the chunk driver shared by both paths, the scalar twin of its two
// primitives (matrix product with a fixed fma chain, polynomial exp) and the dispatch.
// The order every value is computed in is the contract of gdn_chunked.h.
#include "kernels/cpu/gdn_chunked.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"

// The AVX2 twin uses explicit fma only; a multiply followed by an add must stay two roundings in
// both files, so no contraction here either (it matters only if this file is built with FMA).
#pragma GCC optimize("fp-contract=off", "vect-cost-model=dynamic")

namespace weft {

namespace {

// exp(x) by Cephes' expf polynomial (|rel err| ~ 1 ulp on [-87, 88]): x = n·ln2 + r with
// n = nearest integer of x·log2(e), e^r by a degree-7 polynomial, times 2^n. 0 below -87 (the
// result would be subnormal), x clamped to 88 above, NaN passes through.
// gdn_chunked_avx2.cpp computes the same operations lane by lane.
float exp_fixed(float x) {
  if (x != x) return x;
  if (x < -87.0f) return 0.0f;
  const float xc = x < 88.0f ? x : 88.0f;
  const float n = std::nearbyint(xc * 1.44269504088896341f);
  float r = std::fma(n, -0.693359375f, xc);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float z = r * r;
  float y = std::fma(p, z, r);
  y = y + 1.0f;
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

void exp_n_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_fixed(x[i]);
}

void gemm_acc_scalar(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb,
                     int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t c = 0; c < N; ++c) {
      float acc = C[i * ldc + c];
      for (int64_t kk = 0; kk < K; ++kk) acc = std::fma(A[i * lda + kk], B[kk * ldb + c], acc);
      C[i * ldc + c] = acc;
    }
  }
}

void transpose_scalar(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

const GdnChunkedOps kScalarOps = {gemm_acc_scalar, exp_n_scalar, transpose_scalar};

// Per-thread buffers of one head's chunk (sizes for L <= kGdnChunk).
struct ChunkScratch {
  std::vector<double> gamma;       // [L] cumulative log decay from the chunk start
  std::vector<float> xin, xout;    // [2L+1] exponent arguments and results for the row factors
  std::vector<float> dexp, e;      // [L, L] γ_i − γ_j and its exp
  std::vector<float> kt;           // [dk, L] Kᵀ
  std::vector<float> gk, pq;       // [L, L] K Kᵀ and Q Kᵀ (lower block triangle)
  std::vector<float> an, m;        // [L, L] −A (strictly lower) and M (lower)
  std::vector<float> kbn, qd;      // [L, dk] −β e^γ K and e^γ Q
  std::vector<float> klt;          // [dk, L] (e^(γ_last − γ) K)ᵀ
  std::vector<float> delta;        // [L, dv] right-hand side, then δ
  void reserve(int64_t dk, int64_t dv) {
    const size_t C = size_t(kGdnChunk);
    gamma.resize(C);
    xin.resize(2 * C + 1);
    xout.resize(2 * C + 1);
    dexp.resize(C * C);
    e.resize(C * C);
    kt.resize(size_t(dk) * C);
    gk.resize(C * C);
    pq.resize(C * C);
    an.resize(C * C);
    m.resize(C * C);
    kbn.resize(C * size_t(dk));
    qd.resize(C * size_t(dk));
    klt.resize(size_t(dk) * C);
    delta.resize(C * size_t(dv));
  }
};

// Rows of the key-side products computed per call: the lower block triangle in slabs of 8 rows.
constexpr int64_t kSlab = 8;

// One chunk of L tokens from token t0 for value head j; S is that head's state [dk, dv].
void run_chunk(const GdnRecurrentArgs& a, const GdnChunkedOps& ops, ChunkScratch& s, int64_t j,
               int64_t t0, int64_t L, float* S) {
  const int64_t dk = a.dk, dv = a.dv, kh = j / (a.n_v / a.n_k);
  const int64_t ld_in = a.q_stride, ldo = a.n_v * dv;
  const float* q0 = a.q + t0 * ld_in + kh * dk;
  const float* k0 = a.k + t0 * ld_in + kh * dk;
  const float* v0 = a.v + t0 * a.v_stride + j * dv;
  float* out0 = a.out + (t0 * a.n_v + j) * dv;
  // The inputs are rows strided by a whole token (tens of KiB apart): ask for the next chunk's
  // rows now (into L2: they would not fit L1) so that their cache misses overlap this chunk's arithmetic.
  for (int64_t i = L; i < std::min(2 * L, a.T - t0); ++i) {
    for (int64_t off = 0; off < dk; off += 16) {
      __builtin_prefetch(q0 + i * ld_in + off, 0, 2);
      __builtin_prefetch(k0 + i * ld_in + off, 0, 2);
    }
    for (int64_t off = 0; off < dv; off += 16) __builtin_prefetch(v0 + i * a.v_stride + off, 0, 2);
  }
  auto g_at = [&](int64_t i) { return a.g[(t0 + i) * a.n_v + j]; };
  auto beta_at = [&](int64_t i) { return a.beta[(t0 + i) * a.n_v + j]; };

  // Cumulative decay in float64: γ reaches hundreds within a chunk and differences of float
  // sums would lose digits.
  double acc = 0;
  for (int64_t i = 0; i < L; ++i) s.gamma[size_t(i)] = acc += double(g_at(i));
  const double glast = s.gamma[size_t(L - 1)];
  // Row factors: e^γ_i, e^(γ_last − γ_i), e^γ_last.
  for (int64_t i = 0; i < L; ++i) {
    s.xin[size_t(i)] = float(s.gamma[size_t(i)]);
    s.xin[size_t(L + i)] = float(glast - s.gamma[size_t(i)]);
  }
  s.xin[size_t(2 * L)] = float(glast);
  ops.exp_n(s.xin.data(), s.xout.data(), 2 * L + 1);
  const float* eg = s.xout.data();
  const float* el = s.xout.data() + L;
  const float eglast = s.xout[size_t(2 * L)];
  // Pairwise decays E_ij = e^(γ_i − γ_j), j <= i (−inf above the diagonal gives 0).
  for (int64_t i = 0; i < L; ++i)
    for (int64_t jj = 0; jj < L; ++jj)
      s.dexp[size_t(i * L + jj)] = jj <= i ? float(s.gamma[size_t(i)] - s.gamma[size_t(jj)])
                                           : -std::numeric_limits<float>::infinity();
  ops.exp_n(s.dexp.data(), s.e.data(), L * L);

  // Kᵀ, then G = K Kᵀ and P = Q Kᵀ on the lower block triangle (columns < slab end).
  float* __restrict kt = s.kt.data();
  ops.transpose(k0, ld_in, kt, L, L, dk);
  for (int64_t i0 = 0; i0 < L; i0 += kSlab) {
    const int64_t rows = std::min(kSlab, L - i0), cols = std::min(L, i0 + kSlab);
    for (int64_t i = i0; i < i0 + rows; ++i) {
      std::fill_n(s.gk.data() + i * L, cols, 0.0f);
      std::fill_n(s.pq.data() + i * L, cols, 0.0f);
    }
    ops.gemm_acc(s.gk.data() + i0 * L, L, k0 + i0 * ld_in, ld_in, kt, L, rows, cols, dk);
    ops.gemm_acc(s.pq.data() + i0 * L, L, q0 + i0 * ld_in, ld_in, kt, L, rows, cols, dk);
  }
  // −A (strictly lower) and M (lower, zero above).
  for (int64_t i = 0; i < L; ++i) {
    const float b = beta_at(i);
    for (int64_t jj = 0; jj < L; ++jj) {
      const size_t ij = size_t(i * L + jj);
      s.an[ij] = jj < i ? -((b * s.e[ij]) * s.gk[ij]) : 0.0f;
      s.m[ij] = jj <= i ? s.e[ij] * s.pq[ij] : 0.0f;
    }
  }
  // Row-scaled keys and queries.
  float* __restrict kbn = s.kbn.data();
  float* __restrict qd = s.qd.data();
  float* __restrict klt = s.klt.data();
  for (int64_t i = 0; i < L; ++i) {
    const float* k = k0 + i * ld_in;
    const float* q = q0 + i * ld_in;
    const float fk = beta_at(i) * eg[i], fq = eg[i];
    for (int64_t r = 0; r < dk; ++r) {
      kbn[i * dk + r] = -(fk * k[r]);
      qd[i * dk + r] = fq * q[r];
    }
  }
  for (int64_t r = 0; r < dk; ++r)
    for (int64_t i = 0; i < L; ++i) klt[r * L + i] = el[i] * kt[r * L + i];

  // δ: right-hand side βV − diag(βe^γ) K S0, then forward substitution row by row.
  float* __restrict delta = s.delta.data();
  for (int64_t i = 0; i < L; ++i) {
    const float b = beta_at(i);
    const float* v = v0 + i * a.v_stride;
    for (int64_t c = 0; c < dv; ++c) delta[i * dv + c] = b * v[c];
  }
  ops.gemm_acc(delta, dv, kbn, dk, S, dv, L, dv, dk);
  for (int64_t i = 1; i < L; ++i) ops.gemm_acc(delta + i * dv, dv, s.an.data() + i * L, L, delta, dv, 1, dv, i);

  // O = diag(e^γ) Q S0 + M δ, written straight into out.
  for (int64_t i = 0; i < L; ++i) std::fill_n(out0 + i * ldo, dv, 0.0f);
  ops.gemm_acc(out0, ldo, qd, dk, S, dv, L, dv, dk);
  for (int64_t i0 = 0; i0 < L; i0 += kSlab) {
    const int64_t rows = std::min(kSlab, L - i0), depth = std::min(L, i0 + kSlab);
    ops.gemm_acc(out0 + i0 * ldo, ldo, s.m.data() + i0 * L, L, delta, dv, rows, dv, depth);
  }

  // S ← e^γ_last S0 + (e^(γ_last − γ) K)ᵀ δ.
  float* __restrict st = S;
  for (int64_t i = 0; i < dk * dv; ++i) st[i] = eglast * st[i];
  ops.gemm_acc(S, dv, klt, L, delta, dv, dk, dv, L);
}

// Shared by both paths: one task per value head, chunks of kGdnChunk from the call's first token.
void gdn_chunked_run(const GdnRecurrentArgs& a, ThreadPool* pool, const GdnChunkedOps& ops) {
  if (a.T <= 0 || a.n_v <= 0) return;
  auto head = [&](int64_t j) {
    thread_local ChunkScratch scratch;  // per worker thread, reused across calls
    scratch.reserve(a.dk, a.dv);
    float* S = a.state + j * a.dk * a.dv;
    for (int64_t t0 = 0; t0 < a.T; t0 += kGdnChunk)
      run_chunk(a, ops, scratch, j, t0, std::min(kGdnChunk, a.T - t0), S);
  };
  if (pool && pool->size() > 1) pool->parallel_for(a.n_v, head);
  else for (int64_t j = 0; j < a.n_v; ++j) head(j);
}

}  // namespace

const GdnChunkedOps& gdn_chunked_ops_scalar() { return kScalarOps; }

void gdn_chunked_scalar(const GdnRecurrentArgs& a, ThreadPool* pool) { gdn_chunked_run(a, pool, kScalarOps); }

void gdn_chunked_avx2(const GdnRecurrentArgs& a, ThreadPool* pool) {
  gdn_chunked_run(a, pool, gdn_chunked_ops_avx2());
}

void gdn_chunked(const GdnRecurrentArgs& a, ThreadPool* pool) {
  if (use_avx2()) gdn_chunked_avx2(a, pool);
  else gdn_chunked_scalar(a, pool);
}

}  // namespace weft
