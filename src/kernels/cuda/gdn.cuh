// Gated DeltaNet on the GPU: Qwen3-Next unpacking, the depthwise causal conv + SiLU, the per-row
// preparation (l2 norms, β, log decay) and the delta-rule recurrence. Device pointers throughout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"
#include "kernels/gdn_args.h"

namespace weft::cuda {

void gdn_unpack(const float* qkvz, const float* ba, int64_t rows, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv,
                float* mixed, float* z, float* b, float* a, cudaStream_t stream);
// One thread per channel walks the T rows in order with the window in registers (kernel <= 8);
// each output is Σ_j w[c, j]·window[t + j] in j order, then SiLU.
void causal_conv(float* x, int64_t T, int64_t channels, const float* w, int64_t kernel, float* conv_state,
                 cudaStream_t stream);
void gdn_prep(const GdnPrepArgs& a, cudaStream_t stream);
// causal_conv over a.mixed (a.rows rows of a.conv_dim channels: one sequence's rows) followed by
// gdn_prep, in one launch with the same bits (the decode step's form); conv_prep_fusable says
// whether the shape is supported (dk <= 128).
bool conv_prep_fusable(const GdnPrepArgs& a, int64_t kernel);
void causal_conv_prep(const float* w, int64_t kernel, float* conv_state, const GdnPrepArgs& a, cudaStream_t stream);
// The recurrence token by token (the decode form; also serves prefill for now: its result does
// not depend on how rows are split into calls at all). One block per (value head, 32 columns), one thread per
// state column c: S[:, c] decays, kv = Σ_r S[r, c]·k[r] in r order, δ = (v − kv)·β,
// S[:, c] += k·δ, o = Σ_r S[r, c]·q[r] in r order — the CPU scalar kernel's order per column.
void gdn_recurrence(const GdnRecurrentArgs& a, cudaStream_t stream);
// The recurrence followed by rmsnorm_gated over its output rows (y = w·(o·rsqrt(mean(o²)+eps))·
// silu(z), in place), in one launch with the same bits: one block per value head, the norm of each
// token's row right after the row (dv == 128 only: gdn_recurrence_norm_fusable).
struct GatedNormArgs {
  const float* z = nullptr;  // [T, n_v, dv]
  const float* w = nullptr;  // [dv]
  float eps = 0.0f;
};
bool gdn_recurrence_norm_fusable(const GdnRecurrentArgs& a);
void gdn_recurrence_norm(const GdnRecurrentArgs& a, const GatedNormArgs& nw, cudaStream_t stream);

}  // namespace weft::cuda
