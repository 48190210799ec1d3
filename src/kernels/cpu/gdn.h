// Gated DeltaNet kernels: the depthwise causal conv and the gated delta-rule recurrence.
// Source of the math: transformers 5.17 modeling_qwen3_5.py, torch_causal_conv1d_update and
// torch_recurrent_gated_delta_rule.
#pragma once

#include <cstdint>

#include "kernels/gdn_args.h"

namespace weft {

class ThreadPool;

// Depthwise causal conv over T tokens followed by SiLU, in place on x [T, channels].
// w: [channels, kernel]; state: [kernel - 1, channels], the previous inputs (oldest first),
// updated to the last kernel - 1 inputs. out[t][c] = silu(sum_j w[c][j] * in[t - (kernel-1) + j][c]).
void causal_conv1d_silu(float* x, int64_t T, int64_t channels, const float* w, int64_t kernel, float* state);
// The same for channels [c0, c1) only (channels are independent: any split gives the same bits).
void causal_conv1d_silu_channels(float* x, int64_t T, int64_t channels, const float* w, int64_t kernel, float* state,
                                 int64_t c0, int64_t c1);


// Per token, per value head j (key head j / (n_v / n_k)):
//   S *= exp(g); kv = Sᵀk; delta = (v − kv)·beta; S += k ⊗ delta; out = Sᵀq.
// Value heads are independent tasks; tokens run in order inside a task (deterministic).
// Every element is computed with separate roundings in this order: S[r][c] = S[r][c]·decay;
// kv[c] += S[r][c]·k[r] over increasing r (mul, then add); delta[c] = (v[c] − kv[c])·beta;
// S[r][c] += k[r]·delta[c]; out[c] += S[r][c]·q[r] over increasing r; decay = std::exp(g).
// Dispatches to the AVX2 path when weft::use_avx2(); both paths give the same bits.
void gdn_recurrent(const GdnRecurrentArgs& args, ThreadPool* pool);
void gdn_recurrent_scalar(const GdnRecurrentArgs& args, ThreadPool* pool);
// Call only when cpu_features().has_avx2_fma_f16c(); exposed so tests can compare the paths.
void gdn_recurrent_avx2(const GdnRecurrentArgs& args, ThreadPool* pool);

}  // namespace weft
