// Attention over a quantized KV cache: task split, softmax, chunk merging, query quantization,
// and the scalar twins of the vector primitives (the AVX2 set is in attention_quant_avx2.cpp).
#include "kernels/cpu/attention_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/kv_quant.h"

namespace weft {

namespace {

// V rows dequantized per tile: 32 rows x head_dim floats (32 KiB at head_dim 256) stay in L1/L2.
constexpr int64_t kVTile = 32;

bool is_quant(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }
bool is_cache_type(DType t) { return is_quant(t) || t == DType::kF16; }

// ---- Scalar twins. Lane structure mirrors the AVX2 code exactly (see attention_quant.h). ----

float reduce_lanes(const float* lane) {
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

void scores_q8_scalar(const uint8_t* row, const AttnQBlock* q, int64_t group, int64_t nb, float* s) {
  const auto* k = reinterpret_cast<const BlockQ8_0*>(row);
  for (int64_t i = 0; i < group; ++i) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < nb; ++b) {
      const AttnQBlock& qb = q[i * nb + b];
      const float d = qb.d * f16_to_f32(k[b].d);
      for (int l = 0; l < 8; ++l) {
        int32_t sum = 0;
        for (int e = 4 * l; e < 4 * l + 4; ++e) sum += int32_t(k[b].qs[e]) * int32_t(qb.qs[e]);
        lane[l] = std::fma(float(sum), d, lane[l]);
      }
    }
    s[i] = reduce_lanes(lane);
  }
}

void scores_q4_scalar(const uint8_t* row, const AttnQBlock* q, int64_t group, int64_t nb, float* s) {
  const auto* k = reinterpret_cast<const BlockQ4_0*>(row);
  for (int64_t i = 0; i < group; ++i) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < nb; ++b) {
      const AttnQBlock& qb = q[i * nb + b];
      const float d = qb.d * f16_to_f32(k[b].d);
      for (int l = 0; l < 8; ++l) {
        int32_t sum = 0;
        for (int e = 4 * l; e < 4 * l + 4; ++e) {
          const int ku = e < 16 ? (k[b].qs[e] & 0x0f) : (k[b].qs[e - 16] >> 4);  // stored value + 8
          sum += ku * int32_t(qb.qs[e]);
        }
        lane[l] = std::fma(float(sum - qb.lane_sum8[l]), d, lane[l]);
      }
    }
    s[i] = reduce_lanes(lane);
  }
}

void load_row_scalar(DType type, const uint8_t* row, float* dst, int64_t n) { decode_kv_row(type, row, dst, n); }

float dot_scalar(const float* a, const float* b, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = std::fma(a[i + k], b[i + k], lane[k]);
  float s = reduce_lanes(lane);
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

void accumulate_v_scalar(const float* v, int64_t n, const float* p, int64_t p_stride, int64_t group, int64_t hd,
                         float* acc) {
  for (int64_t i = 0; i < group; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float pj = p[i * p_stride + j];
      for (int64_t d = 0; d < hd; ++d) acc[i * hd + d] = std::fma(pj, v[j * hd + d], acc[i * hd + d]);
    }
}

const AttnQuantOps kScalarOps = {scores_q8_scalar, scores_q4_scalar, load_row_scalar, dot_scalar,
                                 accumulate_v_scalar, nullptr};

// ---- Driver (shared by both paths). ----

// Query vectors -> q8 blocks, once per call (never per key): d = max|x| / 127, q = round(x / d).
void quantize_queries(const float* x, int64_t n, AttnQBlock* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    AttnQBlock& q = out[b];
    q.d = d;
    for (int j = 0; j < 32; ++j) q.qs[j] = int8_t(std::lround(xb[j] * id));
    for (int l = 0; l < 8; ++l)
      q.lane_sum8[l] = 8 * (int32_t(q.qs[4 * l]) + q.qs[4 * l + 1] + q.qs[4 * l + 2] + q.qs[4 * l + 3]);
  }
}

struct Partial {
  float* m;
  float* l;
  float* acc;
};

// Scratch floats one task needs: K row, scores [group][chunk], V tile, per-head score temp.
size_t scratch_floats(int64_t hd, int64_t group) {
  return size_t(hd + group * kAttnChunk + kVTile * hd + group);
}

// Partial softmax state of `group` heads over keys [k0, k1) of kv head g.
// qf: float queries [group][hd] (f16 K); qb: q8 queries [group][nb] (quantized K).
void chunk_partial(const AttnQuantOps& o, const KvLayerView& kv, int64_t g, int64_t k0, int64_t k1, const float* qf,
                   const AttnQBlock* qb, int64_t group, float scale, float* scratch, Partial out) {
  const int64_t hd = kv.head_dim, n = k1 - k0, nb = hd / 32;
  float* row = scratch;                    // [hd]
  float* s = row + hd;                     // [group][n]
  float* vt = s + group * kAttnChunk;      // [kVTile][hd]
  float* tmp = vt + kVTile * hd;           // [group]
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* kr = kv.k_row(g, k0 + j);
    if (kv.k_type == DType::kQ8_0) {
      o.scores_q8(kr, qb, group, nb, tmp);
    } else if (kv.k_type == DType::kQ4_0) {
      o.scores_q4(kr, qb, group, nb, tmp);
    } else {
      o.load_row(kv.k_type, kr, row, hd);
      for (int64_t i = 0; i < group; ++i) tmp[i] = o.dot(qf + i * hd, row, hd);
    }
    for (int64_t i = 0; i < group; ++i) s[i * n + j] = tmp[i] * scale;
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
  if (o.accumulate_v_rows != nullptr && o.accumulate_v_rows(kv, g, k0, n, s, n, group, out.acc)) return;
  for (int64_t j0 = 0; j0 < n; j0 += kVTile) {
    const int64_t nt = std::min(kVTile, n - j0);
    for (int64_t j = 0; j < nt; ++j) o.load_row(kv.v_type, kv.v_row(g, k0 + j0 + j), vt + j * hd, hd);
    o.accumulate_v(vt, nt, s + j0, n, group, hd, out.acc);
  }
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

void run(const AttnQuantOps& o, const KvLayerView& kv, const AttentionArgs& a, ThreadPool* pool) {
  const int64_t hd = kv.head_dim, n_kv = kv.n_kv_heads, group = a.n_heads / n_kv, nb = hd / 32;
  const size_t need = scratch_floats(hd, group);
  std::vector<AttnQBlock> qb;
  if (is_quant(kv.k_type)) {
    qb.resize(size_t(a.T * a.n_heads * nb));
    quantize_queries(a.q, a.T * a.n_heads * hd, qb.data());
  }
  auto q8_of = [&](int64_t first_head) { return qb.empty() ? nullptr : qb.data() + first_head * nb; };

  if (a.T == 1) {
    // Decode: (kv head, chunk) tasks, then chunks merged in order per head.
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
      if (scratch.size() < need) scratch.resize(need);
      float* p = partials + idx * stride;
      chunk_partial(o, kv, g, c * kAttnChunk, std::min(n_keys, (c + 1) * kAttnChunk), a.q + g * group * hd,
                    q8_of(g * group), group, a.scale, scratch.data(), {p, p + group, p + 2 * group});
    };
    if (pool) pool->parallel_for(n_kv * n_chunks, task);
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
    const size_t total = need + size_t(group * (hd + 4));
    if (scratch.size() < total) scratch.resize(total);
    float* part = scratch.data() + need;
    float* m = part + group * (hd + 2);
    float* l = m + group;
    const int64_t h0 = t * a.n_heads + g * group;
    float* out = a.out + h0 * hd;
    for (int64_t c = 0; c * kAttnChunk < n_keys; ++c) {
      const int64_t k0 = c * kAttnChunk, k1 = std::min(n_keys, k0 + kAttnChunk);
      Partial p{part, part + group, part + 2 * group};
      if (c == 0) p = {m, l, out};
      chunk_partial(o, kv, g, k0, k1, a.q + h0 * hd, q8_of(h0), group, a.scale, scratch.data(), p);
      if (c == 0) continue;
      for (int64_t i = 0; i < group; ++i)
        merge_into(&m[i], &l[i], out + i * hd, part[i], part[group + i], part + 2 * group + i * hd, hd);
    }
    for (int64_t i = 0; i < group; ++i) {
      const float inv = 1.0f / l[i];
      for (int64_t d = 0; d < hd; ++d) out[i * hd + d] *= inv;
    }
  };
  if (pool) pool->parallel_for(a.T * n_kv, task);
  else for (int64_t i = 0; i < a.T * n_kv; ++i) task(i);
}

}  // namespace

bool attention_quant_supports(const KvLayerView& kv) {
  return is_cache_type(kv.k_type) && is_cache_type(kv.v_type) &&
         !(kv.k_type == DType::kF16 && kv.v_type == DType::kF16) && kv.head_dim > 0 && kv.head_dim % 32 == 0;
}

void attention_quant(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool) {
  // Token t sees rows [0, pos0 + t]; the cache must already hold the last of them.
  WEFT_ASSERT(args.pos0 >= 0 && args.pos0 + args.T <= kv.length, "attention would read past the KV cache");
  static const AttnQuantOps& ops = use_avx512_vnni() ? attn_quant_ops_avx512()
                                   : use_avx2()      ? attn_quant_ops_avx2()
                                                     : kScalarOps;
  run(ops, kv, args, pool);
}

void attention_quant_scalar(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool) {
  // Token t sees rows [0, pos0 + t]; the cache must already hold the last of them.
  WEFT_ASSERT(args.pos0 >= 0 && args.pos0 + args.T <= kv.length, "attention would read past the KV cache");
  run(kScalarOps, kv, args, pool);
}

}  // namespace weft
