// Tiled attention over an f16 KV cache, bit-identical to attention_f16 (see
// attention_f16_prefill.h): the task loops of prefill (query blocks) and decode (the frozen
// kernel's kv head x chunk tasks), softmax and chunk merges, the strict tier's choice between the
// decode twin and the frozen kernel, plus the scalar twins of the two vector primitives. This file is built without -mfma on purpose: the softmax and the
// merge formulas must round exactly as attention_f16.cpp's (multiply, then add).
#include "kernels/cpu/attention_f16_prefill.h"
#include "kernels/cpu/expf_twin.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_merge.h"
#include "kernels/cpu/row_max.h"

namespace weft {

namespace {

// ---- Scalar twins: attention_f16.cpp's dot and axpy orders ----

float dot_scalar(const float* a, const float* b, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = std::fma(a[i + k], b[i + k], lane[k]);
  float s = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

void scores_scalar(const float* q, int64_t rows, const uint16_t* const* k_rows, int64_t n, int64_t hd, float scale,
                   float* kbuf, float* s, int64_t s_stride) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t d = 0; d < hd; ++d) kbuf[d] = f16_to_f32(k_rows[j][d]);
    for (int64_t r = 0; r < rows; ++r) s[r * s_stride + j] = dot_scalar(q + r * hd, kbuf, hd) * scale;
  }
}

void accumulate_v_scalar(const uint16_t* const* v_rows, const int64_t* n_row, int64_t rows, const float* p,
                         int64_t p_stride, int64_t hd, float* vbuf, float* acc) {
  int64_t n_max = 0;
  for (int64_t r = 0; r < rows; ++r) n_max = std::max(n_max, n_row[r]);
  std::fill(acc, acc + rows * hd, 0.0f);
  for (int64_t j = 0; j < n_max; ++j) {
    for (int64_t d = 0; d < hd; ++d) vbuf[d] = f16_to_f32(v_rows[j][d]);
    for (int64_t r = 0; r < rows; ++r) {
      if (j >= n_row[r]) continue;
      const float pj = p[r * p_stride + j];
      float* a = acc + r * hd;
      for (int64_t d = 0; d < hd; ++d) a[d] = std::fma(pj, vbuf[d], a[d]);
    }
  }
}

const AttnF16PrefillOps kScalarOps = {scores_scalar, accumulate_v_scalar, exp_sub_inplace_scalar};

// ---- attention_f16.cpp's softmax and merge, operation for operation ----

// The frozen kernel's softmax (m = max, p = exp(s - m), l = Σ p in key order) for rows [r0, r1) of
// a chunk's scores (row r at s + r·stride, n_row[r] keys), with the exps of a row computed
// together by exp_sub (same bits as std::exp's loop) and then
// l = Σ p in key order, four rows' sums side by side: each row's chain of adds is its own, in its
// own order, so interleaving only keeps more of them in flight (one add per 4-cycle latency).
void softmax_rows(float* s, int64_t stride, const int64_t* n_row, int64_t r0, int64_t r1, float* m_out, float* l_out,
                  void (*exp_sub)(float*, int64_t, float)) {
  for (int64_t r = r0; r < r1; ++r) {
    float* row = s + r * stride;
    m_out[r] = row_max(row, n_row[r]);
    exp_sub(row, n_row[r], m_out[r]);
  }
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const float* p0 = s + r * stride;
    const float* p1 = p0 + stride;
    const float* p2 = p1 + stride;
    const float* p3 = p2 + stride;
    const int64_t n0 = n_row[r], n1 = n_row[r + 1], n2 = n_row[r + 2], n3 = n_row[r + 3];
    const int64_t common = std::min(std::min(n0, n1), std::min(n2, n3));
    float l0 = 0, l1 = 0, l2 = 0, l3 = 0;
    for (int64_t j = 0; j < common; ++j) {
      l0 += p0[j];
      l1 += p1[j];
      l2 += p2[j];
      l3 += p3[j];
    }
    for (int64_t j = common; j < n0; ++j) l0 += p0[j];
    for (int64_t j = common; j < n1; ++j) l1 += p1[j];
    for (int64_t j = common; j < n2; ++j) l2 += p2[j];
    for (int64_t j = common; j < n3; ++j) l3 += p3[j];
    l_out[r] = l0, l_out[r + 1] = l1, l_out[r + 2] = l2, l_out[r + 3] = l3;
  }
  for (; r < r1; ++r) {
    const float* p = s + r * stride;
    float l = 0;
    for (int64_t j = 0; j < n_row[r]; ++j) l += p[j];
    l_out[r] = l;
  }
}

// Query rows per task, aimed for (block tokens × GQA group): enough rows to amortise each K/V
// row's widening, few enough that q, scores and accumulators stay in L2 (64 rows at head_dim
// 256: 64 KiB each). Measured single-thread at 4096 tokens on the shipped model's geometry:
// 64 rows ~7% faster than 32.
constexpr int64_t kRowsPerTask = 64;

template <typename V>
void grow(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Per-thread scratch of a task. Decode tasks use the chunk part (s .. v_rows); prefill tasks also
// the block's query rows and running states (q, acc, m, l, mc, lc).
struct Scratch {
  std::vector<float> q, s, acc, kbuf, vbuf, m, l, mc, lc;
  std::vector<int64_t> n_row;
  std::vector<const uint16_t*> k_rows, v_rows;

  // What one chunk of keys needs for `rows` query rows: their scores, the widened K block and V
  // slices, their key counts and the chunk's row pointers.
  void reserve_chunk(int64_t rows, int64_t hd) {
    grow(s, size_t(rows * kAttnChunk));
    grow(kbuf, size_t(kAttnPrefillKeyBlock * hd));
    grow(vbuf, size_t(std::max<int64_t>(kAttnChunk * 16, hd)));
    grow(n_row, size_t(rows));
    grow(k_rows, size_t(kAttnChunk));
    grow(v_rows, size_t(kAttnChunk));
  }
  // k_rows / v_rows = keys [k0, k0 + n) of kv head g (a division per run, not per key).
  void point_at_rows(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n) {
    kv.k_rows(g, k0, n, k_rows.data());
    kv.v_rows(g, k0, n, v_rows.data());
  }
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

void run(const KvLayerView& kv, const AttentionArgs& a, ThreadPool* pool, int64_t block_tokens,
         const AttnF16PrefillOps& o) {
  // Token t sees rows [0, pos0 + t]; the cache must already hold the last of them.
  WEFT_ASSERT(a.pos0 >= 0 && a.pos0 + a.T <= kv.length, "attention would read past the KV cache");
  const int64_t hd = kv.head_dim, n_kv = kv.n_kv_heads, group = a.n_heads / n_kv;
  int64_t bq = block_tokens;
  if (bq <= 0) {
    bq = std::max<int64_t>(1, kRowsPerTask / group);
    // Keep a few tasks per thread for short prompts (the result does not depend on bq).
    const int64_t threads = pool ? pool->size() : 1;
    while (bq > 1 && ceil_div(a.T, bq) * n_kv < 4 * threads) bq = (bq + 1) / 2;
  }
  const int64_t n_blocks = ceil_div(a.T, bq);

  auto task = [&](int64_t idx) {
    // Later blocks see more keys: hand them out first so the last tasks are the short ones.
    const int64_t b = n_blocks - 1 - idx / n_kv, g = idx % n_kv;
    const int64_t t0 = b * bq, nt = std::min(a.T, t0 + bq) - t0, rows = nt * group;
    const int64_t n_keys_max = a.pos0 + t0 + nt;
    Scratch& sc = thread_scratch();
    sc.reserve_chunk(rows, hd);
    grow(sc.q, size_t(rows * hd));
    grow(sc.acc, size_t(rows * hd));
    grow(sc.m, size_t(rows));
    grow(sc.l, size_t(rows));
    grow(sc.mc, size_t(rows));
    grow(sc.lc, size_t(rows));
    // Row r = tt · group + i: query token t0 + tt, head g · group + i.
    for (int64_t tt = 0; tt < nt; ++tt)
      std::memcpy(sc.q.data() + tt * group * hd, a.q + ((t0 + tt) * a.n_heads + g * group) * hd,
                  size_t(group * hd) * sizeof(float));
    auto out_row = [&](int64_t r) { return a.out + ((t0 + r / group) * a.n_heads + g * group + r % group) * hd; };

    for (int64_t c = 0; c * kAttnChunk < n_keys_max; ++c) {
      const int64_t k0 = c * kAttnChunk, k1 = std::min(n_keys_max, k0 + kAttnChunk), n = k1 - k0;
      // Tokens before tt_first have no key in this chunk (it starts past their causal end).
      const int64_t tt_first = std::max<int64_t>(0, k0 - a.pos0 - t0), r0 = tt_first * group;
      sc.point_at_rows(kv, g, k0, n);
      // Start bringing the chunk's K and V rows from memory / L3 towards L2 before they are read.
      for (int64_t j = 0; j < n; ++j)
        for (int64_t b = 0; b < hd * 2; b += 64) {
          __builtin_prefetch(reinterpret_cast<const char*>(sc.k_rows[size_t(j)]) + b, 0, 2);
          __builtin_prefetch(reinterpret_cast<const char*>(sc.v_rows[size_t(j)]) + b, 0, 2);
        }
      for (int64_t r = r0; r < rows; ++r) sc.n_row[size_t(r)] = std::min(a.pos0 + t0 + r / group + 1, k1) - k0;
      float* s = sc.s.data();
      o.scores(sc.q.data() + r0 * hd, rows - r0, sc.k_rows.data(), n, hd, a.scale, sc.kbuf.data(),
               s + r0 * kAttnChunk, kAttnChunk);
      softmax_rows(s, kAttnChunk, sc.n_row.data(), r0, rows, sc.mc.data(), sc.lc.data(), o.exp_sub);
      o.accumulate_v(sc.v_rows.data(), sc.n_row.data() + r0, rows - r0, s + r0 * kAttnChunk, kAttnChunk, hd,
                     sc.vbuf.data(), sc.acc.data() + r0 * hd);
      for (int64_t r = r0; r < rows; ++r) {
        const float* acc = sc.acc.data() + r * hd;
        if (c == 0) {  // the first chunk is the running state (every row has keys in it)
          sc.m[size_t(r)] = sc.mc[size_t(r)];
          sc.l[size_t(r)] = sc.lc[size_t(r)];
          std::memcpy(out_row(r), acc, size_t(hd) * sizeof(float));
        } else {
          attn_merge_into(&sc.m[size_t(r)], &sc.l[size_t(r)], out_row(r), sc.mc[size_t(r)], sc.lc[size_t(r)], acc, hd);
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* out = out_row(r);
      const float inv = 1.0f / sc.l[size_t(r)];
      for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
    }
  };
  if (pool) pool->parallel_for(n_blocks * n_kv, task);
  else for (int64_t i = 0; i < n_blocks * n_kv; ++i) task(i);
}

const AttnF16PrefillOps& ops_for(AttnTiledPath path) {
  if (path == AttnTiledPath::kScalar || !use_avx2()) return kScalarOps;
  if (path == AttnTiledPath::kBest && use_avx512()) return attn_f16_prefill_ops_avx512();
  return attn_f16_prefill_ops_avx2();
}

}  // namespace

void attention_f16_prefill_blocked(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool,
                                   int64_t block_tokens, AttnTiledPath path) {
  run(kv, args, pool, block_tokens, ops_for(path));
}

void attention_f16_prefill(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool) {
  attention_f16_prefill_blocked(kv, args, pool, 0, AttnTiledPath::kBest);
}

void attention_f16_prefill_scalar(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool) {
  attention_f16_prefill_blocked(kv, args, pool, 0, AttnTiledPath::kScalar);
}

void attention_f16_decode(const KvLayerView& kv, const AttentionArgs& a, ThreadPool* pool, AttnTiledPath path) {
  WEFT_CHECK(a.T == 1, "attention_f16_decode takes one query token");
  WEFT_ASSERT(a.pos0 >= 0 && a.pos0 + 1 <= kv.length, "attention would read past the KV cache");
  const AttnF16PrefillOps& o = ops_for(path);
  const int64_t hd = kv.head_dim, n_kv = kv.n_kv_heads, group = a.n_heads / n_kv;
  const int64_t n_keys = a.pos0 + 1, n_chunks = ceil_div(n_keys, kAttnChunk);
  // Partial c of kv head g: m[group], l[group], acc[group][hd] (the frozen kernel's layout).
  const int64_t stride = group * (hd + 2);
  // Reused across calls (every element is written before it is read); thread_local, so the
  // workers reach it through `partials`.
  thread_local std::vector<float> partials_buffer;
  if (partials_buffer.size() < size_t(n_kv * n_chunks * stride))
    partials_buffer.resize(size_t(n_kv * n_chunks * stride));
  float* const partials = partials_buffer.data();

  auto task = [&](int64_t idx) {
    const int64_t g = idx / n_chunks, c = idx % n_chunks;
    const int64_t k0 = c * kAttnChunk, n = std::min(n_keys, k0 + kAttnChunk) - k0;
    Scratch& sc = thread_scratch();
    sc.reserve_chunk(group, hd);
    sc.point_at_rows(kv, g, k0, n);
    std::fill(sc.n_row.begin(), sc.n_row.begin() + group, n);
    float* part = partials + idx * stride;
    float* s = sc.s.data();
    o.scores(a.q + g * group * hd, group, sc.k_rows.data(), n, hd, a.scale, sc.kbuf.data(), s, kAttnChunk);
    // The frozen softmax of every head's row, its exps by exp_sub (std::exp's bits, vectorized).
    // With the exps 16 at a time the softmax is too short to hide the V rows' reads behind (the
    // libm loop once spread their prefetches over its calls): V is left to the hardware, which
    // measured the same as prefetching it here in bursts (attention_quant_bench at 32K, 2 threads).
    softmax_rows(s, kAttnChunk, sc.n_row.data(), 0, group, part, part + group, o.exp_sub);
    o.accumulate_v(sc.v_rows.data(), sc.n_row.data(), group, s, kAttnChunk, hd, sc.vbuf.data(), part + 2 * group);
  };
  // (kv head, chunk) in cache order: each thread streams one contiguous run of chunks.
  if (pool) pool->parallel_for(n_kv * n_chunks, task, Schedule::kRanges);
  else for (int64_t i = 0; i < n_kv * n_chunks; ++i) task(i);

  // The frozen kernel's merge (attention_merge.h).
  attn_merge_decode_partials(partials, n_kv, group, n_chunks, hd, a.out, pool);
}

namespace {

// 0 = not forced, 1 = frozen, 2 = tiled.
int forced_decode_kernel() {
  static const int forced = [] {
    const char* e = std::getenv("WEFT_ATTN_F16_DECODE");
    if (e == nullptr || *e == '\0') return 0;
    if (std::strcmp(e, "frozen") == 0) return 1;
    if (std::strcmp(e, "tiled") == 0) return 2;
    std::fprintf(stderr, "weft: WEFT_ATTN_F16_DECODE=%s is not frozen or tiled; ignored\n", e);
    return 0;
  }();
  return forced;
}

}  // namespace

void attention_f16_strict(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool) {
  if (args.T > 1) {
    attention_f16_prefill(kv, args, pool);
    return;
  }
  const int forced = forced_decode_kernel();
  const bool tiled = forced == 0 ? use_avx512() : forced == 2;
  if (tiled) attention_f16_decode(kv, args, pool);
  else attention_f16(kv, args, pool);
}

}  // namespace weft
