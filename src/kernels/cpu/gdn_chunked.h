// Chunked (WY / UT-transform) form of the gated delta rule, for prefill: the same recurrence as
// gdn_recurrent, computed 64 tokens at a time with matrix-matrix products.
// Source of the math: Yang, Kautz, Hatamizadeh, "Gated Delta Networks" (2024) §3 and
// flash-linear-attention's chunk_gated_delta_rule; transformers 5.17 modeling_qwen3_5.py,
// torch_chunk_gated_delta_rule. Our own formulation, written for a CPU (see below).
//
// How to call it (drop-in for gdn_recurrent when T > 1):
//   GdnRecurrentArgs args = ...;          // exactly as for gdn_recurrent (kernels/cpu/gdn.h)
//   gdn_chunked(args, pool);              // state updated in place, out [T, n_v, dv] written
// Preconditions: as gdn_recurrent — n_v % n_k == 0; q, k L2-normalised, q already scaled by
// 1/sqrt(dk); g <= 0 (log decay; a positive g is accepted but each chunk's decay must then stay
// below e^88); beta in [0, 1]; out must not alias q, k, v, g, beta or state.
// Decode (T = 1) should stay on gdn_recurrent: a one-token chunk is correct but does extra work.
// Wiring (not done yet; forward.cpp gdn_layer): `if (T > 1) gdn_chunked(args, pool); else
// gdn_recurrent(args, pool);`. The results differ from gdn_recurrent's in the last bits (both are
// within ~4e-7 of float64), so this changes the strict tier: re-record the golden tests. Keep
// Session's prefill batch (default 128) a multiple of 64 so that logits do not depend on it.
//
// Split-invariance contract: a call processes its tokens in chunks of kGdnChunk = 64 counted
// from its own first token (the last chunk may be shorter). Outputs and final state depend only
// on the chunk boundaries, so splitting a prompt into calls whose lengths are multiples of 64
// (the last call may have any length) gives bit-identical outputs and state to one call. A split
// elsewhere is still correct but rounds differently (it moves the chunk boundaries). The
// results do not depend on the thread count (one task per value head, fixed order inside), and
// the AVX-512 and AVX2 paths and the scalar twin are bit-identical (the order below is the contract).
//
// Per value head j (key head j / (n_v/n_k)) and chunk of L tokens i = 0..L-1, state S0 [dk, dv]
// on entry, with γ_i = g_0 + ... + g_i summed in float64 from the chunk start:
//   E_ij = e^(γ_i − γ_j) (j <= i),  A_ij = β_i E_ij k_i·k_j (j < i),  M_ij = E_ij q_i·k_j (j <= i)
//   δ = (I + A)^-1 (βV − diag(β e^γ) K S0)      (forward substitution, one row at a time)
//   O = diag(e^γ) Q S0 + M δ
//   S ← e^(γ_{L-1}) S0 + Kᵀ diag(e^(γ_{L-1} − γ)) δ
// which is the per-token recurrence (S ← S·e^g; δ_t = (v − Sᵀk)·β; S ← S + k⊗δ_t; o = Sᵀq)
// unrolled over the chunk: δ are the delta-rule's corrected values (fla's u − w·S). fla builds
// T = (I + A)^-1 explicitly and forms U = T·βV, W = T·(βK e^γ) so that GPU blocks need no state;
// on a CPU solving for δ directly is cheaper and the same math.
//
// Fixed order (so that SIMD and scalar agree bit for bit): every matrix element is one chain of
// fused multiply-adds in increasing reduction index, started from a stated initial value:
//   G_ij, P_ij  = chain over r of k_i[r]·k_j[r] (resp. q_i[r]·k_j[r]) from +0
//   δ_i[c]      = from β_i·v_i[c]: chain over r of −(β_i e^γ_i k_i[r])·S0[r][c], then over j < i
//                 of −((β_i E_ij)·G_ij)·δ_j[c]
//   O_i[c]      = from +0: chain over r of (e^γ_i q_i[r])·S0[r][c], then over j < 6·(i/6 + 1)
//                 (and j < L) of (E_ij·P_ij)·δ_j[c] (zero above the diagonal)
//   S'[r][c]    = from e^γ_{L-1}·S0[r][c]: chain over i of (e^(γ_{L-1}−γ_i)·k_i[r])·δ_i[c]
// and exponentials use one polynomial exp (gdn_chunked.cpp) written the same way in both paths.
// Every scaling above is one rounded multiply in the order written, e.g. (β_i E_ij)·G_ij.
#pragma once

#include <cstdint>

#include "kernels/cpu/gdn.h"

namespace weft {

class ThreadPool;

constexpr int64_t kGdnChunk = 64;

// Dispatches to the AVX-512 path when weft::use_avx512(), else the AVX2 path when
// weft::use_avx2(), else the scalar twin.
void gdn_chunked(const GdnRecurrentArgs& args, ThreadPool* pool);

// The scalar twin (always compiled), the AVX2/FMA path (call only when
// cpu_features().has_avx2_fma_f16c()) and the AVX-512 path (zmm tiles for the matrix product, the
// AVX2 exp and transpose; call only when cpu_features().has_avx512_core()); exposed so tests can
// compare them bit for bit.
void gdn_chunked_scalar(const GdnRecurrentArgs& args, ThreadPool* pool);
void gdn_chunked_avx2(const GdnRecurrentArgs& args, ThreadPool* pool);
void gdn_chunked_avx512(const GdnRecurrentArgs& args, ThreadPool* pool);

// The two primitives whose SIMD and scalar versions must agree bit for bit; the chunk driver
// (gdn_chunked.cpp) is shared by both paths and does everything else.
struct GdnChunkedOps {
  // C[i*ldc + c] = chain over kk < K of fma(A[i*lda + kk], B[kk*ldb + c], ·) starting from the
  // value already in C, for i < M, c < N.
  void (*gemm_acc)(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb,
                   int64_t M, int64_t N, int64_t K);
  // y[i] = exp(x[i]) by the fixed polynomial; 0 for x < -87 (and for -inf).
  void (*exp_n)(const float* x, float* y, int64_t n);
  // dst[c*ldd + r] = src[r*lds + c] for r < rows, c < cols (exact; here for speed only).
  void (*transpose)(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols);
};
const GdnChunkedOps& gdn_chunked_ops_scalar();
const GdnChunkedOps& gdn_chunked_ops_avx2();  // only when cpu_features().has_avx2_fma_f16c()
// Its own gemm_acc; exp_n and transpose are gdn_chunked_ops_avx2()'s.
const GdnChunkedOps& gdn_chunked_ops_avx512();  // only when cpu_features().has_avx512_core()

}  // namespace weft
