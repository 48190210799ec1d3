// The chunk driver of the gated delta rule, shared by the scalar, AVX2 and AVX-512 paths:
// included by gdn_chunked.cpp, gdn_chunked_avx2.cpp and gdn_chunked_avx512.cpp (after their
// fp-contract pragma), each with its own Ops (static gemm_acc, exp_n, transpose; see
// GdnChunkedOps in gdn_chunked.h). Everything here is element-wise or a fixed sequential loop, so
// compiling it with or without AVX2 / AVX-512 gives the same bits; the order of every value is
// the contract written in gdn_chunked.h.
// Internal linkage only (anonymous namespace): the three copies are compiled with different flags.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>

#include "core/thread_pool.h"
#include "kernels/cpu/gdn_chunked.h"

namespace weft {
namespace {

// Per-thread buffers of one head's chunk (sizes for L <= kGdnChunk). Plain arrays rather than
// std::vector: this header is compiled into the SIMD files too, and a library template
// instantiated there could be the copy the linker keeps for the scalar path (same reason for
// memset over std::fill_n below).
struct ChunkScratch {
  std::unique_ptr<double[]> gamma_buf;
  std::unique_ptr<float[]> buf;
  int64_t dk = -1, dv = -1;
  double* gamma = nullptr;  // [L] cumulative log decay from the chunk start
  float* xin = nullptr;     // [2L+1] exponent arguments of the row factors
  float* xout = nullptr;    // [2L+1] the row factors
  float* dexp = nullptr;    // [L, L] γ_i − γ_j
  float* e = nullptr;       // [L, L] E
  float* kt = nullptr;      // [dk, L] Kᵀ
  float* gk = nullptr;      // [L, L] K Kᵀ (lower block triangle)
  float* pq = nullptr;      // [L, L] Q Kᵀ (lower block triangle)
  float* an = nullptr;      // [L, L] −A (strictly lower)
  float* m = nullptr;       // [L, L] M (lower, zero above)
  float* kbn = nullptr;     // [L, dk] −β e^γ K
  float* qd = nullptr;      // [L, dk] e^γ Q
  float* klt = nullptr;     // [dk, L] (e^(γ_last − γ) K)ᵀ
  float* delta = nullptr;   // [L, dv] right-hand side, then δ
  void reserve(int64_t dk_, int64_t dv_) {
    if (dk_ == dk && dv_ == dv) return;
    dk = dk_;
    dv = dv_;
    const int64_t C = kGdnChunk, sizes[] = {2 * C + 1, 2 * C + 1, C * C, C * C, dk * C, C * C, C * C,
                                            C * C, C * C, C * dk, C * dk, dk * C, C * dv};
    int64_t total = 0;
    for (int64_t n : sizes) total += (n + 15) & ~int64_t(15);  // 64-byte multiples
    gamma_buf.reset(new double[size_t(C)]);
    buf.reset(new float[size_t(total)]);
    gamma = gamma_buf.get();
    float** parts[] = {&xin, &xout, &dexp, &e, &kt, &gk, &pq, &an, &m, &kbn, &qd, &klt, &delta};
    float* p = buf.get();
    for (size_t i = 0; i < std::size(sizes); ++i) {
      *parts[i] = p;
      p += (sizes[i] + 15) & ~int64_t(15);
    }
  }
};

// The key-side products G, P and M δ go by slabs of kSlab rows (the register tile's height):
// slab rows i0..i0+5 take columns (resp. depth) below min(L, i0 + kSlab), rounded up to 16 for G
// and P, whose extra entries above the diagonal are never read.
constexpr int64_t kSlab = 6;

// One chunk of L tokens from token t0 for value head j; S is that head's state [dk, dv].
template <class Ops>
void run_chunk(const GdnRecurrentArgs& a, ChunkScratch& s, int64_t j, int64_t t0, int64_t L, float* S) {
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
  for (int64_t i = 0; i < L; ++i) s.gamma[(i)] = acc += double(g_at(i));
  const double glast = s.gamma[(L - 1)];
  // Row factors: e^γ_i, e^(γ_last − γ_i), e^γ_last.
  for (int64_t i = 0; i < L; ++i) {
    s.xin[(i)] = float(s.gamma[(i)]);
    s.xin[(L + i)] = float(glast - s.gamma[(i)]);
  }
  s.xin[(2 * L)] = float(glast);
  Ops::exp_n(s.xin, s.xout, 2 * L + 1);
  const float* eg = s.xout;
  const float* el = s.xout + L;
  const float eglast = s.xout[(2 * L)];
  // Pairwise decays E_ij = e^(γ_i − γ_j) for j <= i (the rest of E is never read).
  for (int64_t i = 0; i < L; ++i) {
    float* __restrict d = s.dexp + i * L;
    const double* __restrict gam = s.gamma;
    const double gi = gam[i];
    for (int64_t jj = 0; jj <= i; ++jj) d[jj] = float(gi - gam[jj]);
    Ops::exp_n(d, s.e + i * L, i + 1);
  }

  // Kᵀ, then G = K Kᵀ and P = Q Kᵀ on the lower block triangle (columns < slab end).
  float* __restrict kt = s.kt;
  Ops::transpose(k0, ld_in, kt, L, L, dk);
  for (int64_t i0 = 0; i0 < L; i0 += kSlab) {
    const int64_t rows = std::min(kSlab, L - i0), cols = std::min(L, (i0 + kSlab + 15) & ~int64_t(15));
    for (int64_t i = i0; i < i0 + rows; ++i) {
      std::memset(s.gk + i * L, 0, size_t(cols) * sizeof(float));
      std::memset(s.pq + i * L, 0, size_t(cols) * sizeof(float));
    }
    Ops::gemm_acc(s.gk + i0 * L, L, k0 + i0 * ld_in, ld_in, kt, L, rows, cols, dk);
    Ops::gemm_acc(s.pq + i0 * L, L, q0 + i0 * ld_in, ld_in, kt, L, rows, cols, dk);
  }
  // −A (strictly lower) and M (lower, zero above); only computed entries of G and P are read.
  for (int64_t i = 0; i < L; ++i) {
    const float b = beta_at(i);
    const float* __restrict e = s.e + i * L;
    const float* __restrict gk = s.gk + i * L;
    const float* __restrict pq = s.pq + i * L;
    float* __restrict an = s.an + i * L;
    float* __restrict m = s.m + i * L;
    for (int64_t jj = 0; jj < i; ++jj) an[jj] = -((b * e[jj]) * gk[jj]);
    for (int64_t jj = 0; jj <= i; ++jj) m[jj] = e[jj] * pq[jj];
    std::memset(an + i, 0, size_t(L - i) * sizeof(float));
    std::memset(m + i + 1, 0, size_t(L - i - 1) * sizeof(float));
  }
  // Row-scaled keys and queries.
  float* __restrict kbn = s.kbn;
  float* __restrict qd = s.qd;
  float* __restrict klt = s.klt;
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
  float* __restrict delta = s.delta;
  for (int64_t i = 0; i < L; ++i) {
    const float b = beta_at(i);
    const float* v = v0 + i * a.v_stride;
    for (int64_t c = 0; c < dv; ++c) delta[i * dv + c] = b * v[c];
  }
  Ops::gemm_acc(delta, dv, kbn, dk, S, dv, L, dv, dk);
  for (int64_t i = 1; i < L; ++i) Ops::gemm_acc(delta + i * dv, dv, s.an + i * L, L, delta, dv, 1, dv, i);

  // O = diag(e^γ) Q S0 + M δ, written straight into out.
  for (int64_t i = 0; i < L; ++i) std::memset(out0 + i * ldo, 0, size_t(dv) * sizeof(float));
  Ops::gemm_acc(out0, ldo, qd, dk, S, dv, L, dv, dk);
  for (int64_t i0 = 0; i0 < L; i0 += kSlab) {
    const int64_t rows = std::min(kSlab, L - i0), depth = std::min(L, i0 + kSlab);
    Ops::gemm_acc(out0 + i0 * ldo, ldo, s.m + i0 * L, L, delta, dv, rows, dv, depth);
  }

  // S ← e^γ_last S0 + (e^(γ_last − γ) K)ᵀ δ.
  float* __restrict st = S;
  for (int64_t i = 0; i < dk * dv; ++i) st[i] = eglast * st[i];
  Ops::gemm_acc(S, dv, klt, L, delta, dv, dk, dv, L);
}

// Shared by all paths: one task per value head, chunks of kGdnChunk from the call's first token.
template <class Ops>
void gdn_chunked_run(const GdnRecurrentArgs& a, ThreadPool* pool) {
  if (a.T <= 0 || a.n_v <= 0) return;
  auto head = [&](int64_t j) {
    thread_local ChunkScratch scratch;  // per worker thread, reused across calls
    scratch.reserve(a.dk, a.dv);
    float* S = a.state + j * a.dk * a.dv;
    for (int64_t t0 = 0; t0 < a.T; t0 += kGdnChunk)
      run_chunk<Ops>(a, scratch, j, t0, std::min(kGdnChunk, a.T - t0), S);
  };
  if (pool && pool->size() > 1) pool->parallel_for(a.n_v, head);
  else for (int64_t j = 0; j < a.n_v; ++j) head(j);
}

}  // namespace
}  // namespace weft
