// The forward pass. Each step cites the transformers 5.17 code it reproduces
// (modeling_qwen3_5.py / modeling_qwen3_5_moe.py / modeling_qwen3_next.py / modeling_llama.py).
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/gdn.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_convert.h"

namespace weft {

namespace {

float* sized(std::vector<float>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

// y[T, rows] = x[T, cols] · Wᵀ
void linear(const Matrix& w, const float* x, int64_t T, float* y, ThreadPool* pool) {
  matmul(w.dtype, w.data, w.rows, w.cols, x, w.cols, T, y, w.rows, pool);
}

// inv_freq as transformers computes it in float32 (_compute_default_rope_parameters), with the
// optional Llama-3 smoothing (_compute_llama3_parameters).
void rope_inv_freq(const ModelConfig& c, std::vector<float>* out) {
  const int64_t half = c.rotary_dim / 2;
  out->resize(size_t(half));
  for (int64_t i = 0; i < half; ++i) {
    float e = float(2 * i) / float(c.rotary_dim);
    float inv = 1.0f / std::pow(float(c.rope_theta), e);
    if (c.rope_llama3_factor > 0) {
      const double pi = 3.14159265358979323846;
      double factor = c.rope_llama3_factor, lo = c.rope_llama3_low_freq, hi = c.rope_llama3_high_freq;
      double old_len = double(c.rope_llama3_original_max);
      double wavelen = 2 * pi / inv;
      double low_wavelen = old_len / lo, high_wavelen = old_len / hi;
      double v = wavelen > low_wavelen ? inv / factor : inv;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        double smooth = (old_len / wavelen - lo) / (hi - lo);
        v = (1 - smooth) * v / factor + smooth * v;
      }
      inv = float(v);
    }
    (*out)[size_t(i)] = inv;
  }
}

// Gated full attention (Qwen3_5Attention.forward) or plain GQA attention (Llama/Qwen3).
// rot_k / rot_v: KvOptions::rotates_k / rotates_v (quantized tier only, off by default).
void attention_layer(const ModelConfig& c, const AttentionWeights& w, KvCache& kv, int64_t slot,
                     int64_t pos0, const float* xn, int64_t T, float* y, ForwardBuffers& B, ThreadPool* pool,
                     bool rot_k = false, bool rot_v = false) {
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
  const int64_t q_rows = w.q_proj.rows, half = c.rotary_dim / 2;
  float* qg = sized(B.a, T * q_rows);
  float* k = sized(B.b, T * nkv * hd);
  float* v = sized(B.c, T * nkv * hd);
  float* q = sized(B.d, T * nh * hd);
  float* att = sized(B.e, T * nh * hd * (c.attn_output_gate ? 2 : 1));
  float* gate = att + T * nh * hd;
  linear(w.q_proj, xn, T, qg, pool);
  linear(w.k_proj, xn, T, k, pool);
  linear(w.v_proj, xn, T, v, pool);
  for (int64_t t = 0; t < T; ++t) {
    if (!w.q_bias.empty())
      for (int64_t i = 0; i < q_rows; ++i) qg[t * q_rows + i] += w.q_bias[size_t(i)];
    if (!w.k_bias.empty())
      for (int64_t i = 0; i < nkv * hd; ++i) {
        k[t * nkv * hd + i] += w.k_bias[size_t(i)];
        v[t * nkv * hd + i] += w.v_bias[size_t(i)];
      }
    const float* cs = B.rope_cos.data() + t * half;
    const float* sn = B.rope_sin.data() + t * half;
    for (int64_t h = 0; h < nh; ++h) {
      // q_proj viewed as [heads, 2·head_dim] and chunked: [query | gate] per head.
      const float* src = qg + t * q_rows + h * hd * (c.attn_output_gate ? 2 : 1);
      float* qh = q + (t * nh + h) * hd;
      std::copy(src, src + hd, qh);
      if (c.attn_output_gate) std::copy(src + hd, src + 2 * hd, gate + (t * nh + h) * hd);
      if (c.qk_norm) rmsnorm(qh, w.q_norm.data(), qh, hd, float(c.rms_norm_eps), c.norm_plus_one);
      rope_rotate_half(qh, cs, sn, c.rotary_dim);
    }
    for (int64_t h = 0; h < nkv; ++h) {
      float* kh = k + (t * nkv + h) * hd;
      if (c.qk_norm) rmsnorm(kh, w.k_norm.data(), kh, hd, float(c.rms_norm_eps), c.norm_plus_one);
      rope_rotate_half(kh, cs, sn, c.rotary_dim);
    }
  }
  // --kv-rotate: q·k = (Hq)·(Hk), so rotating both leaves the scores unchanged while the cache
  // quantizes H·k, whose outliers are spread over the whole head; V is stored as H·v and the
  // output rotated back below. Off (the default, and always for f16/f32) nothing here runs.
  if (rot_k) {
    fwht_rows(q, T * nh, hd);
    fwht_rows(k, T * nkv, hd);
  }
  if (rot_v) fwht_rows(v, T * nkv, hd);
  // Cache write (K after RoPE), then attention over the cache.
  kv.append(slot, k, v, T);
  AttentionArgs args;
  args.q = q;
  args.T = T;
  args.pos0 = pos0;
  args.n_heads = nh;
  args.scale = 1.0f / std::sqrt(float(hd));
  args.out = att;
  const KvLayerView view = kv.view(slot);
  if (view.k_type == DType::kF16 && view.v_type == DType::kF16) {
    attention_f16(view, args, pool);  // strict tier
  } else if (attention_quant_supports(view)) {
    attention_quant(view, args, pool);  // quantized KV tier
  } else {
    attention_reference(view, args, pool);
  }
  if (rot_v) fwht_rows(att, T * nh, hd);  // o = H·Σ p·(H v) = Σ p·v
  if (c.attn_output_gate)
    for (int64_t i = 0; i < T * nh * hd; ++i) att[i] *= sigmoidf(gate[i]);
  linear(w.o_proj, att, T, y, pool);
}

// Gated DeltaNet (Qwen3_5GatedDeltaNet.forward / Qwen3NextGatedDeltaNet.forward).
void gdn_layer(const ModelConfig& c, const GdnWeights& w, RecurrentLayerState& st, const float* xn, int64_t T,
               float* y, ForwardBuffers& B, ThreadPool* pool) {
  const int64_t nk = c.linear_num_key_heads, nv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, r = nv / nk;
  const int64_t key_dim = c.gdn_key_dim(), value_dim = c.gdn_value_dim(), conv_dim = c.gdn_conv_dim();
  float* mixed = sized(B.a, T * conv_dim);  // [T, q | k | v]
  float* z = sized(B.b, T * value_dim);
  float* ba = sized(B.c, T * 2 * nv);       // b then a, each [T, nv]
  float* beta = ba;
  float* g = ba + T * nv;
  float* core = sized(B.d, T * value_dim);
  if (c.gdn_packed_qkvz) {
    // in_proj_qkvz rows are grouped per key head: [q (dk) | k (dk) | v (r·dv) | z (r·dv)];
    // in_proj_ba per key head: [b (r) | a (r)] (fix_query_key_value_ordering).
    const int64_t group = 2 * dk + 2 * r * dv;
    float* packed = sized(B.e, T * std::max(nk * group, 2 * nv));
    linear(w.in_proj_qkvz, xn, T, packed, pool);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < nk; ++h) {
        const float* src = packed + t * nk * group + h * group;
        std::copy(src, src + dk, mixed + t * conv_dim + h * dk);
        std::copy(src + dk, src + 2 * dk, mixed + t * conv_dim + key_dim + h * dk);
        std::copy(src + 2 * dk, src + 2 * dk + r * dv, mixed + t * conv_dim + 2 * key_dim + h * r * dv);
        std::copy(src + 2 * dk + r * dv, src + group, z + t * value_dim + h * r * dv);
      }
    }
    linear(w.in_proj_ba, xn, T, packed, pool);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nk; ++h)
        for (int64_t i = 0; i < r; ++i) {
          beta[t * nv + h * r + i] = packed[t * 2 * nv + h * 2 * r + i];
          g[t * nv + h * r + i] = packed[t * 2 * nv + h * 2 * r + r + i];
        }
  } else {
    linear(w.in_proj_qkv, xn, T, mixed, pool);
    linear(w.in_proj_z, xn, T, z, pool);
    linear(w.in_proj_b, xn, T, beta, pool);
    linear(w.in_proj_a, xn, T, g, pool);
  }
  // Depthwise causal conv + SiLU over the concatenated q|k|v channels.
  causal_conv1d_silu(mixed, T, conv_dim, w.conv1d.data(), c.linear_conv_kernel_dim, st.conv.data());
  const float q_scale = 1.0f / std::sqrt(float(dk));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < nk; ++h) {
      float* qh = mixed + t * conv_dim + h * dk;
      float* kh = mixed + t * conv_dim + key_dim + h * dk;
      l2norm(qh, dk, 1e-6f);
      l2norm(kh, dk, 1e-6f);
      for (int64_t i = 0; i < dk; ++i) qh[i] *= q_scale;
    }
    for (int64_t j = 0; j < nv; ++j) {
      beta[t * nv + j] = sigmoidf(beta[t * nv + j]);
      g[t * nv + j] = -std::exp(w.a_log[size_t(j)]) * softplusf(g[t * nv + j] + w.dt_bias[size_t(j)]);
    }
  }
  GdnRecurrentArgs args;
  args.state = st.ssm.data();
  args.q = mixed;
  args.k = mixed + key_dim;
  args.v = mixed + 2 * key_dim;
  args.q_stride = conv_dim;
  args.v_stride = conv_dim;
  args.g = g;
  args.beta = beta;
  args.out = core;
  args.T = T;
  args.n_k = nk;
  args.n_v = nv;
  args.dk = dk;
  args.dv = dv;
  gdn_recurrent(args, pool);
  // Gated RMSNorm per value head (plain w, then ·silu(z)), then the output projection.
  for (int64_t i = 0; i < T * nv; ++i)
    rmsnorm_gated(core + i * dv, z + i * dv, w.norm.data(), core + i * dv, dv, float(c.rms_norm_eps));
  linear(w.out_proj, core, T, y, pool);
}

// SwiGLU MLP: down(silu(gate(x)) · up(x)).
void mlp(const ExpertWeights& w, const float* x, int64_t T, float* y, float* g, float* u, ThreadPool* pool) {
  const int64_t I = w.gate_proj.rows;
  linear(w.gate_proj, x, T, g, pool);
  linear(w.up_proj, x, T, u, pool);
  swiglu(g, u, g, T * I);
  linear(w.down_proj, g, T, y, pool);
}

// Sparse MoE block (Qwen3_5MoeSparseMoeBlock): softmax router over all experts, top-k,
// optional renormalisation, experts run on the tokens routed to them, plus a shared expert
// scaled by sigmoid(shared_expert_gate(x)).
void moe_layer(const ModelConfig& c, const FfnWeights& w, const float* xn, int64_t T, float* y,
               ForwardBuffers& B, ThreadPool* pool) {
  const int64_t H = c.hidden_size, E = c.num_experts, K = c.num_experts_per_tok;
  const int64_t I = std::max(c.moe_intermediate_size, c.shared_expert_intermediate_size);
  float* logits = sized(B.router, T * E);
  linear(w.router, xn, T, logits, pool);
  // Per token: top-k expert ids and weights.
  std::vector<int32_t>& top = B.moe_top;
  std::vector<float>& weight = B.moe_weight;
  std::vector<int32_t>& order = B.moe_order;
  top.resize(size_t(T * K));
  weight.resize(size_t(T * K));
  order.resize(size_t(E));
  for (int64_t t = 0; t < T; ++t) {
    float* p = logits + t * E;
    softmax(p, E);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += p[order[size_t(k)]];
    for (int64_t k = 0; k < K; ++k) {
      top[size_t(t * K + k)] = order[size_t(k)];
      weight[size_t(t * K + k)] = c.norm_topk_prob ? float(p[order[size_t(k)]] / sum) : p[order[size_t(k)]];
    }
  }
  std::fill(y, y + T * H, 0.0f);
  float* xin = sized(B.moe_in, T * H);
  float* gbuf = sized(B.moe_g, T * I);
  float* ubuf = sized(B.moe_u, T * I);
  float* out = sized(B.moe_out, T * H);
  // Experts in index order (as transformers accumulates them); tokens of an expert batched.
  for (int64_t e = 0; e < E; ++e) {
    B.moe_rows.clear();
    for (int64_t i = 0; i < T * K; ++i)
      if (top[size_t(i)] == e) B.moe_rows.push_back(int32_t(i));
    if (B.moe_rows.empty()) continue;
    const int64_t n = int64_t(B.moe_rows.size());
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = B.moe_rows[size_t(r)] / K;
      std::copy(xn + t * H, xn + (t + 1) * H, xin + r * H);
    }
    mlp(w.experts[size_t(e)], xin, n, out, gbuf, ubuf, pool);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t slot = B.moe_rows[size_t(r)], t = slot / K;
      const float wt = weight[size_t(slot)];
      for (int64_t h = 0; h < H; ++h) y[t * H + h] += wt * out[r * H + h];
    }
  }
  if (w.has_shared_expert) {
    mlp(w.shared_expert, xn, T, out, gbuf, ubuf, pool);
    float* sg = sized(B.moe_in, T);
    linear(w.shared_expert_gate, xn, T, sg, pool);
    for (int64_t t = 0; t < T; ++t) {
      const float s = sigmoidf(sg[t]);
      for (int64_t h = 0; h < H; ++h) y[t * H + h] += s * out[t * H + h];
    }
  }
}

}  // namespace

Status forward(const Model& model, ModelState& state, const int32_t* ids, int64_t T,
               const ForwardOptions& options, ForwardBuffers& B, ThreadPool* pool) {
  const ModelConfig& c = model.config();
  const ModelWeights& W = model.weights();
  const int64_t H = c.hidden_size, V = c.vocab_size, pos0 = state.position();
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= V)
      return Status::error("token id " + std::to_string(ids[t]) + " at index " + std::to_string(t) +
                           " is outside the vocabulary [0, " + std::to_string(V) + ")");
  if (T <= 0) return Status();
  if ((state.kv_options().rotates_k() || state.kv_options().rotates_v()) && !fwht_size_ok(c.head_dim))
    return Status::error("--kv-rotate needs head_dim to be a power of two (Walsh-Hadamard transform); this model's "
                         "head_dim is " + std::to_string(c.head_dim) + " (run without --kv-rotate)");

  // RoPE tables for these positions: angle = position · inv_freq in float32, as transformers.
  if (B.inv_freq.empty()) rope_inv_freq(c, &B.inv_freq);
  const int64_t half = c.rotary_dim / 2;
  float* cs = sized(B.rope_cos, T * half);
  float* sn = sized(B.rope_sin, T * half);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(pos0 + t) * B.inv_freq[size_t(i)];
      cs[t * half + i] = float(std::cos(double(angle)));
      sn[t * half + i] = float(std::sin(double(angle)));
    }

  // Embed.
  float* x = sized(B.x, T * H);
  float* xn = sized(B.xn, T * H);
  float* y = sized(B.y, T * H);
  const size_t row_bytes = size_t(H) * dtype_size(W.embed_tokens.dtype);
  for (int64_t t = 0; t < T; ++t)
    convert_row_to_f32(W.embed_tokens.dtype, static_cast<const uint8_t*>(W.embed_tokens.data) + size_t(ids[t]) * row_bytes,
                       x + t * H, H);

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = W.layers[size_t(l)];
    // Token mixer: norm, attention or GDN, residual.
    for (int64_t t = 0; t < T; ++t)
      rmsnorm(x + t * H, L.input_layernorm.data(), xn + t * H, H, float(c.rms_norm_eps), c.norm_plus_one);
    if (L.kind == LayerKind::kFullAttention) {
      attention_layer(c, L.attn, state.kv(), state.slot(l), pos0, xn, T, y, B, pool,
                      state.kv_options().rotates_k(), state.kv_options().rotates_v());
    } else {
      gdn_layer(c, L.gdn, state.recurrent().layer(state.slot(l)), xn, T, y, B, pool);
    }
    for (int64_t i = 0; i < T * H; ++i) x[i] += y[i];
    // Channel mixer: norm, MLP or MoE, residual.
    for (int64_t t = 0; t < T; ++t)
      rmsnorm(x + t * H, L.post_attention_layernorm.data(), xn + t * H, H, float(c.rms_norm_eps), c.norm_plus_one);
    if (L.ffn_kind == FfnKind::kMoe) {
      moe_layer(c, L.ffn, xn, T, y, B, pool);
    } else {
      const int64_t I = c.intermediate_size;
      mlp(L.ffn.dense, xn, T, y, sized(B.a, T * I), sized(B.b, T * I), pool);
    }
    for (int64_t i = 0; i < T * H; ++i) x[i] += y[i];
  }
  state.advance(T);

  // Final norm and output head.
  if (options.logits) {
    const int64_t first = options.all_logits ? 0 : T - 1, n = T - first;
    for (int64_t t = first; t < T; ++t)
      rmsnorm(x + t * H, W.final_norm.data(), xn + (t - first) * H, H, float(c.rms_norm_eps), c.norm_plus_one);
    linear(W.lm_head, xn, n, options.logits, pool);
  }
  return Status();
}

}  // namespace weft
