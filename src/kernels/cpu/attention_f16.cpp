// Strict-tier attention over an f16 KV cache. FROZEN: see attention.h. Any change to what this
// file computes changes the strict tier's golden outputs and needs an explicit decision.
//
// Each task handles one kv head and one chunk of kAttnChunk keys for all query heads of the GQA
// group: every K and V row is converted from f16 once and used by every head of the group.
// A chunk yields a partial softmax state (max m, sum l, unnormalised accumulator); partials are
// merged in chunk order (log-sum-exp), so the split is fixed and the result thread-independent.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_f16_ops.h"

namespace weft {

namespace {

void load_f16_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

// Eight interleaved partial sums, reduced pairwise: the same order as the AVX2 twin's lanes.
float dot_scalar(const float* a, const float* b, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = std::fma(a[i + k], b[i + k], lane[k]);
  float s = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

void axpy_scalar(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(alpha, x[i], y[i]);
}

void scores_scalar(const float* q, int64_t group, const float* row, int64_t hd, float scale, float* s,
                   int64_t s_stride) {
  for (int64_t i = 0; i < group; ++i) s[i * s_stride] = dot_scalar(q + i * hd, row, hd) * scale;
}

void accumulate_v_scalar(const uint16_t* const* rows, int64_t n, const float* p, int64_t p_stride, int64_t group,
                         int64_t hd, float* acc) {
  std::vector<float> row(static_cast<size_t>(hd));
  for (int64_t j = 0; j < n; ++j) {
    load_f16_scalar(rows[j], row.data(), hd);
    for (int64_t i = 0; i < group; ++i) axpy_scalar(p[i * p_stride + j], row.data(), acc + i * hd, hd);
  }
}

const AttnF16Ops kScalarOps = {load_f16_scalar, dot_scalar, axpy_scalar, scores_scalar, accumulate_v_scalar};

const AttnF16Ops& ops() {
  static const AttnF16Ops& chosen = use_avx2() ? attn_f16_ops_avx2() : kScalarOps;
  return chosen;
}

// Partial softmax state of `group` heads over one chunk: m[group], l[group], acc[group][hd].
struct Partial {
  float* m;
  float* l;
  float* acc;
};

// Computes the partial state for keys [k0, k1) of kv head g, for query vectors q[group][hd].
void chunk_partial(const KvLayerView& kv, int64_t g, int64_t k0, int64_t k1, const float* q,
                   int64_t group, float scale, float* scratch, Partial out) {
  const AttnF16Ops& o = ops();
  const int64_t hd = kv.head_dim, n = k1 - k0;
  float* row = scratch;              // [hd]
  float* s = scratch + hd;           // [group][n]
  for (int64_t j = 0; j < n; ++j) {
    o.load_row(reinterpret_cast<const uint16_t*>(kv.k_row(g, k0 + j)), row, hd);
    o.scores(q, group, row, hd, scale, s + j, n);
  }
  for (int64_t i = 0; i < group; ++i) {
    float m = s[i * n];
    for (int64_t j = 1; j < n; ++j) m = std::max(m, s[i * n + j]);
    float l = 0;
    for (int64_t j = 0; j < n; ++j) {
      s[i * n + j] = std::exp(s[i * n + j] - m);
      l += s[i * n + j];
    }
    out.m[i] = m;
    out.l[i] = l;
  }
  std::fill(out.acc, out.acc + group * hd, 0.0f);
  const uint16_t* v_rows[kAttnChunk];
  for (int64_t j = 0; j < n; ++j) v_rows[j] = reinterpret_cast<const uint16_t*>(kv.v_row(g, k0 + j));
  o.accumulate_v(v_rows, n, s, n, group, hd, out.acc);
}

// Merges partial (m2, l2, acc2) into the running state (m1, l1, acc1) of one head.
void merge_into(float* m1, float* l1, float* acc1, float m2, float l2, const float* acc2, int64_t hd) {
  const float m = std::max(*m1, m2);
  const float a = std::exp(*m1 - m), b = std::exp(m2 - m);
  for (int64_t d = 0; d < hd; ++d) acc1[d] = acc1[d] * a + acc2[d] * b;
  *l1 = *l1 * a + l2 * b;
  *m1 = m;
}

std::vector<float>& thread_scratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

}  // namespace

void attention_f16(const KvLayerView& kv, const AttentionArgs& a, ThreadPool* pool) {
  // Token t sees rows [0, pos0 + t]; the cache must already hold the last of them.
  WEFT_ASSERT(a.pos0 >= 0 && a.pos0 + a.T <= kv.length, "attention would read past the KV cache");
  const int64_t hd = kv.head_dim, n_kv = kv.n_kv_heads, group = a.n_heads / n_kv;
  const size_t scratch_floats = size_t(hd + group * kAttnChunk);

  if (a.T == 1) {
    // Decode: split the context over (kv head, chunk) tasks, then merge chunks in order.
    const int64_t n_keys = a.pos0 + 1, n_chunks = ceil_div(n_keys, kAttnChunk);
    const int64_t stride = group * (hd + 2);
    // Reused across calls: a fresh multi-MiB vector per call costs page faults and zeroing
    // at every layer of every token (every element is written before it is read).
    // (thread_local, so the workers must reach it through `partials`, a plain pointer.)
    thread_local std::vector<float> partials_buffer;
    if (partials_buffer.size() < size_t(n_kv * n_chunks * stride))
      partials_buffer.resize(size_t(n_kv * n_chunks * stride));
    float* const partials = partials_buffer.data();
    auto task = [&](int64_t idx) {
      const int64_t g = idx / n_chunks, c = idx % n_chunks;
      auto& scratch = thread_scratch();
      if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
      float* p = partials + idx * stride;
      chunk_partial(kv, g, c * kAttnChunk, std::min(n_keys, (c + 1) * kAttnChunk), a.q + g * group * hd, group,
                    a.scale, scratch.data(), {p, p + group, p + 2 * group});
    };
    // (kv head, chunk) in cache order: each thread streams one contiguous run of chunks.
    if (pool) pool->parallel_for(n_kv * n_chunks, task, Schedule::kRanges);
    else for (int64_t i = 0; i < n_kv * n_chunks; ++i) task(i);
    for (int64_t g = 0; g < n_kv; ++g) {
      for (int64_t i = 0; i < group; ++i) {
        const float* p0 = partials + g * n_chunks * stride;
        float m = p0[i], l = p0[group + i];
        float* out = a.out + (g * group + i) * hd;
        std::copy(p0 + 2 * group + i * hd, p0 + 2 * group + (i + 1) * hd, out);
        for (int64_t c = 1; c < n_chunks; ++c) {
          const float* pc = p0 + c * stride;
          merge_into(&m, &l, out, pc[i], pc[group + i], pc + 2 * group + i * hd, hd);
        }
        const float inv = 1.0f / l;
        for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
      }
    }
    return;
  }

  // Prefill: one task per (query token, kv head), walking its causal keys chunk by chunk.
  auto task = [&](int64_t idx) {
    const int64_t t = idx / n_kv, g = idx % n_kv, n_keys = a.pos0 + t + 1;
    auto& scratch = thread_scratch();
    const size_t need = scratch_floats + size_t(group * (hd + 2));
    if (scratch.size() < need) scratch.resize(need);
    float* part = scratch.data() + scratch_floats;
    float* out = a.out + (t * a.n_heads + g * group) * hd;
    const float* q = a.q + (t * a.n_heads + g * group) * hd;
    std::vector<float> m(static_cast<size_t>(group)), l(static_cast<size_t>(group));
    for (int64_t c = 0; c * kAttnChunk < n_keys; ++c) {
      const int64_t k0 = c * kAttnChunk, k1 = std::min(n_keys, k0 + kAttnChunk);
      Partial p{part, part + group, part + 2 * group};
      if (c == 0) p = {m.data(), l.data(), out};
      chunk_partial(kv, g, k0, k1, q, group, a.scale, scratch.data(), p);
      if (c == 0) continue;
      for (int64_t i = 0; i < group; ++i)
        merge_into(&m[size_t(i)], &l[size_t(i)], out + i * hd, part[i], part[group + i], part + 2 * group + i * hd, hd);
    }
    for (int64_t i = 0; i < group; ++i) {
      const float inv = 1.0f / l[size_t(i)];
      for (int64_t d = 0; d < hd; ++d) out[i * hd + d] *= inv;
    }
  };
  if (pool) pool->parallel_for(a.T * n_kv, task);
  else for (int64_t i = 0; i < a.T * n_kv; ++i) task(i);
}

}  // namespace weft
