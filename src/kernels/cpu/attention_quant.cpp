// Attention over a quantized KV cache: task split, softmax, chunk merging, query quantization,
// and the scalar twins of the vector primitives (the AVX2 set is in attention_quant_avx2.cpp).
#include "kernels/cpu/attention_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention_merge.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/row_max.h"

namespace weft {

namespace {

// f16 V rows (beside a quantized K) decoded per tile: 32 rows x head_dim floats (32 KiB at head_dim
// 256) stay in L1/L2. Quantized V takes pv_quant (integers).
constexpr int64_t kVTile = 32;

bool is_quant(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }
bool is_cache_type(DType t) { return is_quant(t) || t == DType::kF16; }

// ---- Scalar twins. Lane structure mirrors the AVX2 code exactly (see attention_quant.h). ----

float reduce_lanes(const float* lane) {
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// Scores of a q8_0 / q4_0 key row for every head: per block the exact integer dot, then one
// float fma per block (see AttnQuantOps::scores).
template <bool kQ4>
void scores_scalar(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const AttnGroupQuery& q, float scale,
                   float* s) {
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = kv.k_row(g, k0 + j);
    for (int64_t i = 0; i < q.group; ++i) {
      float acc = 0;
      for (int64_t b = 0; b < q.nb; ++b) {
        const AttnQBlock& qb = q.qb[i * q.nb + b];
        int32_t dot = 0;
        float dk;
        if constexpr (kQ4) {
          const BlockQ4_0& k = reinterpret_cast<const BlockQ4_0*>(row)[b];
          for (int e = 0; e < 16; ++e) dot += int32_t(k.qs[e] & 0x0f) * qb.qs[e] + int32_t(k.qs[e] >> 4) * qb.qs[e + 16];
          dot -= 8 * qb.qsum;  // stored value + 8
          dk = f16_to_f32(k.d);
        } else {
          const BlockQ8_0& k = reinterpret_cast<const BlockQ8_0*>(row)[b];
          for (int e = 0; e < 32; ++e) dot += int32_t(k.qs[e]) * qb.qs[e];
          dk = f16_to_f32(k.d);
        }
        acc = std::fma(float(dot), qb.d * dk, acc);
      }
      s[i * n + j] = acc * scale;
    }
  }
}

void scores_scalar_any(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const AttnGroupQuery& q, float scale,
                       float* s) {
  if (kv.k_type == DType::kQ4_0) scores_scalar<true>(kv, g, k0, n, q, scale, s);
  else scores_scalar<false>(kv, g, k0, n, q, scale, s);
}

float exp_sum_scalar(float* x, int64_t n, float m) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) {
      x[j + l] = attn_exp(x[j + l] - m);
      lane[l] += x[j + l];
    }
  float sum = reduce_lanes(lane);
  for (; j < n; ++j) {
    x[j] = attn_exp(x[j] - m);
    sum += x[j];
  }
  return sum;
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

// Block b of a q8_0 / q4_0 V row: its scale (f32) and its 32 codes (q4_0: nibble − 8).
void v_block_codes(bool q4, const uint8_t* row, int64_t b, float* d, int32_t* codes) {
  if (q4) {
    const BlockQ4_0& v = reinterpret_cast<const BlockQ4_0*>(row)[b];
    *d = f16_to_f32(v.d);
    for (int e = 0; e < 16; ++e) {
      codes[e] = int32_t(v.qs[e] & 0x0f) - 8;
      codes[e + 16] = int32_t(v.qs[e] >> 4) - 8;
    }
  } else {
    const BlockQ8_0& v = reinterpret_cast<const BlockQ8_0*>(row)[b];
    *d = f16_to_f32(v.d);
    for (int e = 0; e < 32; ++e) codes[e] = v.qs[e];
  }
}

// AttnQuantOps::pv_quant, literally.
void pv_quant_scalar(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
                     int64_t group, float* acc) {
  const bool q4 = kv.v_type == DType::kQ4_0;
  const int64_t hd = kv.head_dim, nb = hd / 32;
  const uint8_t* rows[kAttnPvKeys];
  float d[kAttnPvKeys];
  int32_t codes[kAttnPvKeys][32];
  // Per head of the group, reused across calls (one per chunk, kv head and layer: no allocation).
  thread_local std::vector<AttnPvScale> head;
  head.resize(static_cast<size_t>(group));
  for (int64_t j0 = 0; j0 < n; j0 += kAttnPvKeys) {
    const int64_t nt = std::min(kAttnPvKeys, n - j0);
    kv.v_rows(g, k0 + j0, nt, rows);
    for (int64_t i = 0; i < group; ++i) {
      float pmax = 0.0f;
      for (int64_t j = 0; j < nt; ++j) pmax = std::max(pmax, p[i * p_stride + j0 + j]);
      head[size_t(i)] = attn_pv_head_scale(pmax);
    }
    for (int64_t b = 0; b < nb; ++b) {
      float dmax = 0.0f;
      for (int64_t j = 0; j < nt; ++j) {
        v_block_codes(q4, rows[j], b, &d[j], codes[j]);
        dmax = std::max(dmax, std::fabs(d[j]));
      }
      const AttnPvScale blk = attn_pv_block_scale(dmax);
      for (int64_t i = 0; i < group; ++i) {
        const float inv = head[size_t(i)].inv * blk.inv, out = head[size_t(i)].out * blk.out;
        int32_t a[32] = {};
        for (int64_t j = 0; j < nt; ++j) {
          const int32_t w = attn_round_i32(p[i * p_stride + j0 + j] * d[j] * inv);
          for (int e = 0; e < 32; ++e) a[e] += w * codes[j][e];
        }
        float* o = acc + i * hd + 32 * b;
        for (int e = 0; e < 32; ++e) o[e] = std::fma(float(a[e]), out, o[e]);
      }
    }
  }
}

const AttnQuantOps kScalarOps = {scores_scalar_any, exp_sum_scalar, load_row_scalar, dot_scalar,
                                 accumulate_v_scalar, pv_quant_scalar};

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
    q.qsum = 0;
    for (int j = 0; j < 32; ++j) {
      q.qs[j] = int8_t(std::lround(xb[j] * id));
      q.qsum += q.qs[j];
    }
  }
}

// The vector paths' tiles of one GQA group: [ceil(group / 8)][nb], from its blocks [group][nb].
void make_tiles(const AttnQBlock* qb, int64_t group, int64_t nb, AttnQTile* tiles) {
  for (int64_t t = 0; t * 8 < group; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      AttnQTile& tile = tiles[t * nb + b];
      std::memset(&tile, 0, sizeof tile);
      for (int64_t h = 0; h < 8 && t * 8 + h < group; ++h) {
        const AttnQBlock& q = qb[(t * 8 + h) * nb + b];
        std::memcpy(tile.qs[h], q.qs, 32);
        for (int c = 0; c < 8; ++c) std::memcpy(tile.qt[c][h], q.qs + 4 * c, 4);
        tile.d[h] = q.d;
        tile.bias8[h] = -8 * q.qsum;
        tile.bias128[h] = -128 * q.qsum;
      }
    }
}

int64_t tiles_per_group(int64_t group, int64_t nb) { return (group + 7) / 8 * nb; }

struct Partial {
  float* m;
  float* l;
  float* acc;
};

// Scratch floats one task needs: K row, scores [group][chunk], V tile.
size_t scratch_floats(int64_t hd, int64_t group) { return size_t(hd + group * kAttnChunk + kVTile * hd); }

// Partial softmax state of the group's heads over keys [k0, k1) of kv head g.
void chunk_partial(const AttnQuantOps& o, const KvLayerView& kv, int64_t g, int64_t k0, int64_t k1,
                   const AttnGroupQuery& q, float scale, float* scratch, Partial out) {
  const int64_t hd = kv.head_dim, n = k1 - k0, group = q.group;
  float* row = scratch;                    // [hd]
  float* s = row + hd;                     // [group][n]
  float* vt = s + group * kAttnChunk;      // [kVTile][hd]
  if (is_quant(kv.k_type)) {
    o.scores(kv, g, k0, n, q, scale, s);
  } else {
    for (int64_t j = 0; j < n; ++j) {
      o.load_row(kv.k_type, kv.k_row(g, k0 + j), row, hd);
      for (int64_t i = 0; i < group; ++i) s[i * n + j] = o.dot(q.qf + i * hd, row, hd) * scale;
    }
  }
  for (int64_t i = 0; i < group; ++i) {
    const float m = row_max(s + i * n, n);
    out.m[i] = m;
    out.l[i] = o.exp_sum(s + i * n, n, m);
  }
  std::fill(out.acc, out.acc + group * hd, 0.0f);
  if (is_quant(kv.v_type)) {
    o.pv_quant(kv, g, k0, n, s, n, group, out.acc);
    return;
  }
  for (int64_t j0 = 0; j0 < n; j0 += kVTile) {
    const int64_t nt = std::min(kVTile, n - j0);
    for (int64_t j = 0; j < nt; ++j) o.load_row(kv.v_type, kv.v_row(g, k0 + j0 + j), vt + j * hd, hd);
    o.accumulate_v(vt, nt, s + j0, n, group, hd, out.acc);
  }
}


std::vector<float>& thread_scratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

void run(const AttnQuantOps& o, const KvLayerView& kv, const AttentionArgs& a, ThreadPool* pool) {
  const int64_t hd = kv.head_dim, n_kv = kv.n_kv_heads, group = a.n_heads / n_kv, nb = hd / 32;
  const int64_t n_tiles = tiles_per_group(group, nb);
  const size_t need = scratch_floats(hd, group);
  std::vector<AttnQBlock> qb;
  if (is_quant(kv.k_type)) {
    qb.resize(size_t(a.T * a.n_heads * nb));
    quantize_queries(a.q, a.T * a.n_heads * hd, qb.data());
  }
  // The query of the group whose first head (over all tokens) is h0; tiles: where to build its
  // vector-path tiles (quantized K only).
  auto group_query = [&](int64_t h0, AttnQTile* tiles) {
    AttnGroupQuery q{a.q + h0 * hd, nullptr, nullptr, group, nb};
    if (!qb.empty()) {
      q.qb = qb.data() + h0 * nb;
      make_tiles(q.qb, group, nb, tiles);
      q.tiles = tiles;
    }
    return q;
  };

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
    // One token: each group's query forms are built once here, not once per chunk.
    std::vector<AttnQTile> tiles(size_t(n_kv * n_tiles));
    std::vector<AttnGroupQuery> queries;
    for (int64_t g = 0; g < n_kv; ++g) queries.push_back(group_query(g * group, tiles.data() + g * n_tiles));
    auto task = [&](int64_t idx) {
      const int64_t g = idx / n_chunks, c = idx % n_chunks;
      auto& scratch = thread_scratch();
      if (scratch.size() < need) scratch.resize(need);
      float* p = partials + idx * stride;
      chunk_partial(o, kv, g, c * kAttnChunk, std::min(n_keys, (c + 1) * kAttnChunk), queries[size_t(g)], a.scale,
                    scratch.data(), {p, p + group, p + 2 * group});
    };
    // (kv head, chunk) in cache order: each thread streams one contiguous run of chunks.
    if (pool) pool->parallel_for(n_kv * n_chunks, task, Schedule::kRanges);
    else for (int64_t i = 0; i < n_kv * n_chunks; ++i) task(i);
    // The chunks merged per head, heads in parallel (attention_merge.h); run serially this merge was
    // 8% of a one-thread 32K q8_0 call (perf), while the other threads waited.
    attn_merge_decode_partials(partials, n_kv, group, n_chunks, hd, a.out, pool);
    return;
  }

  // Prefill: one task per (query token, kv head), walking its causal keys chunk by chunk.
  auto task = [&](int64_t idx) {
    const int64_t t = idx / n_kv, g = idx % n_kv, n_keys = a.pos0 + t + 1;
    auto& scratch = thread_scratch();
    const size_t tile_floats = size_t(n_tiles) * sizeof(AttnQTile) / sizeof(float);
    const size_t total = need + size_t(group * (hd + 4)) + tile_floats;
    if (scratch.size() < total) scratch.resize(total);
    float* part = scratch.data() + need;
    float* m = part + group * (hd + 2);
    float* l = m + group;
    // AttnQTile holds only 4-byte fields, so a float buffer is suitably aligned for it.
    auto* tiles = reinterpret_cast<AttnQTile*>(scratch.data() + need + size_t(group * (hd + 4)));
    const int64_t h0 = t * a.n_heads + g * group;
    const AttnGroupQuery q = group_query(h0, tiles);
    float* out = a.out + h0 * hd;
    for (int64_t c = 0; c * kAttnChunk < n_keys; ++c) {
      const int64_t k0 = c * kAttnChunk, k1 = std::min(n_keys, k0 + kAttnChunk);
      Partial p{part, part + group, part + 2 * group};
      if (c == 0) p = {m, l, out};
      chunk_partial(o, kv, g, k0, k1, q, a.scale, scratch.data(), p);
      if (c == 0) continue;
      for (int64_t i = 0; i < group; ++i)
        attn_merge_into(&m[i], &l[i], out + i * hd, part[i], part[group + i], part + 2 * group + i * hd, hd);
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

float attn_exp(float x) {
  x = x > kAttnExpMin ? x : kAttnExpMin;
  const float n = std::nearbyint(x * kAttnLog2e);
  float r = std::fma(n, -kAttnLn2Hi, x);
  r = std::fma(n, -kAttnLn2Lo, r);
  float p = kAttnExpP[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kAttnExpP[i]);
  const float r2 = r * r;
  const float y = std::fma(p, r2, r) + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  return y * std::bit_cast<float>(bits);
}

const AttnQuantOps& attn_quant_ops_scalar() { return kScalarOps; }

void attention_quant_with(const AttnQuantOps& ops, const KvLayerView& kv, const AttentionArgs& args,
                          ThreadPool* pool) {
  // Token t sees rows [0, pos0 + t]; the cache must already hold the last of them.
  WEFT_ASSERT(args.pos0 >= 0 && args.pos0 + args.T <= kv.length, "attention would read past the KV cache");
  run(ops, kv, args, pool);
}

void attention_quant(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool) {
  static const AttnQuantOps& ops = use_avx512_vnni() ? attn_quant_ops_avx512()
                                   : use_avx2()      ? attn_quant_ops_avx2()
                                                     : kScalarOps;
  attention_quant_with(ops, kv, args, pool);
}

void attention_quant_scalar(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool) {
  attention_quant_with(kScalarOps, kv, args, pool);
}

}  // namespace weft
