// Small per-token operations of the forward pass: normalisation, RoPE, activations, softmax.
// They cost O(hidden) per token, far below the matrix products, so they are plain scalar loops
// with double accumulators where a reduction is involved (deterministic and accurate).
#pragma once

#include <cstdint>

namespace weft {

// y = x / sqrt(mean(x^2) + eps) * (plus_one ? 1 + w : w). x and y may alias. n values.
// (transformers: Qwen3_5RMSNorm uses 1 + w; LlamaRMSNorm / Qwen3RMSNorm use w.)
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps, bool plus_one);

// Gated RMSNorm of a GDN output head (Qwen3_5RMSNormGated): y = rmsnorm(x)·w · silu(z).
void rmsnorm_gated(const float* x, const float* z, const float* w, float* y, int64_t n, float eps);

// x / sqrt(sum(x^2) + eps), the l2norm of the gated delta rule (eps 1e-6 there).
void l2norm(float* x, int64_t n, float eps);

// Rotate-half RoPE on the first rotary_dim values of one head vector, in place.
// cos/sin: [rotary_dim / 2] for this position.
void rope_rotate_half(float* x, const float* cos, const float* sin, int64_t rotary_dim);

inline float silu(float x) { return x / (1.0f + __builtin_expf(-x)); }
float sigmoidf(float x);
float softplusf(float x);  // torch's softplus (beta 1, threshold 20)

// out[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// In-place softmax over n values (max-subtracted, double sum).
void softmax(float* x, int64_t n);

}  // namespace weft
