// The decode chunk merge shared by the non-frozen CPU attention paths (attention_f16_prefill.cpp's
// f16 decode and prefill, attention_quant.cpp): the frozen kernel's log-sum-exp merge
// (attention_f16.cpp), operation for operation, so every path keeps its bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/thread_pool.h"

namespace weft {

// Merges partial (m2, l2, acc2) into the running state (m1, l1, acc1) of one head: acc1·a + acc2·b
// per element as two multiplies and an add (no fma), four at a time in SSE (the x86-64 baseline),
// the same IEEE operations as the scalar loop, so the same bits (-O2 leaves that loop scalar).
inline void attn_merge_into(float* m1, float* l1, float* acc1, float m2, float l2, const float* acc2, int64_t hd) {
  const float m = std::max(*m1, m2);
  const float a = std::exp(*m1 - m), b = std::exp(m2 - m);
  int64_t d = 0;
#if defined(__SSE2__)
  const __m128 va = _mm_set1_ps(a), vb = _mm_set1_ps(b);
  for (; d + 4 <= hd; d += 4)
    _mm_storeu_ps(acc1 + d, _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(acc1 + d), va), _mm_mul_ps(_mm_loadu_ps(acc2 + d), vb)));
#endif
  for (; d < hd; ++d) acc1[d] = acc1[d] * a + acc2[d] * b;
  *l1 = *l1 * a + l2 * b;
  *m1 = m;
}

// A decode call's output from its chunk partials (the frozen kernel's layout: chunk c of kv head g
// at partials + (g·n_chunks + c)·group·(hd + 2) holds m[group], l[group], acc[group][hd]): per
// head, chunk 0 is the running state, chunks 1.. merge in order, then acc · (1 / l). Heads are
// independent, so they merge in parallel past 16 chunks (a row's order, so its bits, stays).
inline void attn_merge_decode_partials(const float* partials, int64_t n_kv, int64_t group, int64_t n_chunks,
                                       int64_t hd, float* out, ThreadPool* pool) {
  const int64_t stride = group * (hd + 2);
  auto merge_row = [&](int64_t row) {
    const int64_t g = row / group, i = row % group;
    const float* p0 = partials + g * n_chunks * stride;
    float m = p0[i], l = p0[group + i];
    float* o = out + row * hd;
    std::copy(p0 + 2 * group + i * hd, p0 + 2 * group + (i + 1) * hd, o);
    for (int64_t c = 1; c < n_chunks; ++c) {
      const float* pc = p0 + c * stride;
      attn_merge_into(&m, &l, o, pc[i], pc[group + i], pc + 2 * group + i * hd, hd);
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
  };
  // A row's merge reads n_chunks x hd floats: worth a parallel region only past a few chunks.
  if (pool && n_chunks >= 16) pool->parallel_for(n_kv * group, merge_row);
  else for (int64_t r = 0; r < n_kv * group; ++r) merge_row(r);
}

}  // namespace weft
