// AttentionArgs: the query side of a causal attention call, the same for every backend.
#pragma once

#include <cstdint>

namespace weft {

struct AttentionArgs {
  const float* q = nullptr;  // [T, n_heads, head_dim], after q_norm and RoPE
  int64_t T = 0;             // query tokens; token t sits at position pos0 + t
  int64_t pos0 = 0;          // and sees cache rows [0, pos0 + t] (the cache already holds them)
  int64_t n_heads = 0;       // query heads; head h reads kv head h / (n_heads / n_kv_heads)
  float scale = 1.0f;        // usually head_dim^-0.5
  float* out = nullptr;      // [T, n_heads, head_dim]
};

}  // namespace weft
