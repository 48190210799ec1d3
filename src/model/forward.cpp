// The forward pass. Each step cites the transformers 5.17 code it reproduces
// (modeling_qwen3_5.py / modeling_qwen3_5_moe.py / modeling_qwen3_next.py / modeling_llama.py).
// Every op runs on the Backend; this file only decides what runs, in which order, on which rows.
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/footprint.h"

namespace weft {

namespace {

// The batch as the layers see it: rows of all sequences back to back; sequence s owns rows
// [first[s], first[s] + batch[s].n).
struct Rows {
  std::span<const SequenceRows> seqs;
  const int64_t* first = nullptr;
  int64_t total = 0;
  const float* cos = nullptr;  // [total, rotary_dim / 2], RoPE of each row's position
  const float* sin = nullptr;
};

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

const float* or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

// Gated full attention (Qwen3_5Attention.forward) or plain GQA attention (Llama/Qwen3).
void attention_layer(const ModelConfig& c, const AttentionWeights& w, int64_t layer, const Rows& rows,
                     const float* xn, float* y, Backend& be) {
  const int64_t R = rows.total, nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
  float* qg = be.buffer(Buf::kA, R * w.q_proj.rows);
  float* k = be.buffer(Buf::kB, R * nkv * hd);
  float* v = be.buffer(Buf::kC, R * nkv * hd);
  float* q = be.buffer(Buf::kD, R * nh * hd);
  float* att = be.buffer(Buf::kE, R * nh * hd * (c.attn_output_gate ? 2 : 1));
  float* gate = att + R * nh * hd;
  be.matmul(w.q_proj, xn, R, qg);
  be.matmul(w.k_proj, xn, R, k);
  be.matmul(w.v_proj, xn, R, v);
  thread_local std::vector<AttentionCall> calls;
  calls.clear();
  for (size_t s = 0; s < rows.seqs.size(); ++s) {
    const SequenceRows& seq = rows.seqs[s];
    ModelState& st = *seq.state;
    const int64_t r0 = rows.first[s], n = seq.n;
    const bool rot_k = st.kv_options().rotates_k(), rot_v = st.kv_options().rotates_v();
    // Biases, [query | gate] split, q/k norms, RoPE; with --kv-rotate, H·q and H·k (q·k is
    // unchanged, the cache quantizes H·k whose outliers are spread) and H·v.
    AttentionPrepArgs p;
    p.qg = qg + r0 * w.q_proj.rows;
    p.k = k + r0 * nkv * hd;
    p.v = v + r0 * nkv * hd;
    p.q = q + r0 * nh * hd;
    p.gate = gate + r0 * nh * hd;
    p.q_bias = or_null(w.q_bias);
    p.k_bias = or_null(w.k_bias);
    p.v_bias = or_null(w.v_bias);
    p.q_norm = or_null(w.q_norm);
    p.k_norm = or_null(w.k_norm);
    p.cos = rows.cos + r0 * (c.rotary_dim / 2);
    p.sin = rows.sin + r0 * (c.rotary_dim / 2);
    p.rows = n;
    p.n_heads = nh;
    p.n_kv = nkv;
    p.head_dim = hd;
    p.rotary_dim = c.rotary_dim;
    p.gated = c.attn_output_gate;
    p.norm_plus_one = c.norm_plus_one;
    p.rotate_k = rot_k;
    p.rotate_v = rot_v;
    p.eps = float(c.rms_norm_eps);
    be.attention_prep(p);
    // Cache write (K after RoPE), then attention over the cache.
    const int64_t slot = st.slot(layer), pos0 = st.position();
    be.kv_append(st.kv(), slot, p.k, p.v, n);
    AttentionCall call;
    call.kv = st.kv().view(slot);
    call.args.n_heads = nh;
    call.args.scale = 1.0f / std::sqrt(float(hd));
    // Decode numerics: row by row, each row gets exactly a single decode step's arithmetic.
    const bool by_row = seq.numerics == RowNumerics::kDecode;
    for (int64_t i = 0; i < (by_row ? n : 1); ++i) {
      call.args.q = p.q + i * nh * hd;
      call.args.T = by_row ? 1 : n;
      call.args.pos0 = pos0 + i;
      call.args.out = att + (r0 + i) * nh * hd;
      calls.push_back(call);
    }
  }
  be.attention(calls.data(), int64_t(calls.size()));
  for (size_t s = 0; s < rows.seqs.size(); ++s)  // o = H·Σ p·(H v) = Σ p·v
    if (rows.seqs[s].state->kv_options().rotates_v())
      be.hadamard_rows(att + rows.first[s] * nh * hd, rows.seqs[s].n * nh, hd);
  if (c.attn_output_gate) be.mul_sigmoid(att, gate, R * nh * hd);
  be.matmul(w.o_proj, att, R, y);
}

// Gated DeltaNet (Qwen3_5GatedDeltaNet.forward / Qwen3NextGatedDeltaNet.forward).
void gdn_layer(const ModelConfig& c, const GdnWeights& w, int64_t layer, const Rows& rows, const float* xn, float* y,
               Backend& be) {
  const int64_t R = rows.total, nk = c.linear_num_key_heads, nv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const int64_t key_dim = c.gdn_key_dim(), value_dim = c.gdn_value_dim(), conv_dim = c.gdn_conv_dim();
  float* mixed = be.buffer(Buf::kA, R * conv_dim);  // [R, q | k | v]
  float* z = be.buffer(Buf::kB, R * value_dim);
  float* ba = be.buffer(Buf::kC, R * 2 * nv);        // b then a, each [R, nv]
  float* beta = ba;
  float* g = ba + R * nv;
  float* core = be.buffer(Buf::kD, R * value_dim);
  if (c.gdn_packed_qkvz) {
    const int64_t group = 2 * dk + 2 * (nv / nk) * dv;
    float* packed = be.buffer(Buf::kE, R * (nk * group + 2 * nv));
    be.matmul(w.in_proj_qkvz, xn, R, packed);
    be.matmul(w.in_proj_ba, xn, R, packed + R * nk * group);
    be.gdn_unpack(packed, packed + R * nk * group, R, nk, nv, dk, dv, mixed, z, beta, g);
  } else {
    be.matmul(w.in_proj_qkv, xn, R, mixed);
    be.matmul(w.in_proj_z, xn, R, z);
    be.matmul(w.in_proj_b, xn, R, beta);
    be.matmul(w.in_proj_a, xn, R, g);
  }
  // Depthwise causal conv + SiLU over the concatenated q|k|v channels, per sequence.
  for (size_t s = 0; s < rows.seqs.size(); ++s) {
    RecurrentLayerState& st = rows.seqs[s].state->recurrent().layer(rows.seqs[s].state->slot(layer));
    be.causal_conv(mixed + rows.first[s] * conv_dim, rows.seqs[s].n, conv_dim, w.conv1d.data(),
                   c.linear_conv_kernel_dim, st.conv.data());
  }
  GdnPrepArgs prep;
  prep.mixed = mixed;
  prep.beta = beta;
  prep.g = g;
  prep.a_log = w.a_log.data();
  prep.dt_bias = w.dt_bias.data();
  prep.rows = R;
  prep.conv_dim = conv_dim;
  prep.n_k = nk;
  prep.n_v = nv;
  prep.dk = dk;
  be.gdn_prep(prep);
  // The delta-rule recurrence, per sequence on its own state.
  thread_local std::vector<GdnCall> calls;
  calls.clear();
  for (size_t s = 0; s < rows.seqs.size(); ++s) {
    const SequenceRows& seq = rows.seqs[s];
    const int64_t r0 = rows.first[s];
    GdnCall& call = calls.emplace_back();
    GdnRecurrentArgs& args = call.args;
    args.state = seq.state->recurrent().layer(seq.state->slot(layer)).ssm.data();
    args.q = mixed + r0 * conv_dim;
    args.k = mixed + r0 * conv_dim + key_dim;
    args.v = mixed + r0 * conv_dim + 2 * key_dim;
    args.q_stride = conv_dim;
    args.v_stride = conv_dim;
    args.g = g + r0 * nv;
    args.beta = beta + r0 * nv;
    args.out = core + r0 * value_dim;
    args.T = seq.n;
    args.n_k = nk;
    args.n_v = nv;
    args.dk = dk;
    args.dv = dv;
    // Prefill rows take the chunked form even when there is a single row: a prompt split at a
    // multiple of kPrefillChunk must see the same arithmetic on both sides of the cut.
    call.chunked = seq.numerics == RowNumerics::kPrefill;
  }
  be.gdn_recurrence(calls.data(), int64_t(calls.size()));
  // Gated RMSNorm per value head (plain w, then ·silu(z)), then the output projection.
  be.rmsnorm_gated(core, z, w.norm.data(), core, R * nv, dv, float(c.rms_norm_eps));
  const float* out_in = core;
  if (!w.out_proj_head_order.empty()) {
    // out_proj's columns are in the file's value-head order (weights.h): feed it the heads in
    // that order, an exact move of activations instead of re-encoding quantized weights.
    thread_local std::vector<int32_t> order;
    order.resize(size_t(R * nv));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < nv; ++i) order[size_t(r * nv + i)] = int32_t(r * nv) + w.out_proj_head_order[size_t(i)];
    float* tiled = be.buffer(Buf::kE, R * value_dim);
    be.gather_rows(core, order.data(), R * nv, dv, tiled);
    out_in = tiled;
  }
  be.matmul(w.out_proj, out_in, R, y);
}

// SwiGLU MLP: down(silu(gate(x)) · up(x)).
void mlp(const ExpertWeights& w, const float* x, int64_t R, float* y, Backend& be) {
  const int64_t I = w.gate_proj.rows;
  float* g = be.buffer(Buf::kMoeG, R * I);
  float* u = be.buffer(Buf::kMoeU, R * I);
  be.matmul(w.gate_proj, x, R, g);
  be.matmul(w.up_proj, x, R, u);
  be.swiglu(g, u, g, R * I);
  be.matmul(w.down_proj, g, R, y);
}

// Sparse MoE block (Qwen3_5MoeSparseMoeBlock): softmax router over all experts, top-k, optional
// renormalisation; the batch's (row, expert) slots grouped by expert so each selected expert's
// weights are read once for all its rows; plus a shared expert scaled by
// sigmoid(shared_expert_gate(x)).
void moe_layer(const ModelConfig& c, const FfnWeights& w, int64_t R, const float* xn, float* y, Backend& be) {
  const int64_t H = c.hidden_size, E = c.num_experts, K = c.num_experts_per_tok, I = c.moe_intermediate_size;
  float* logits = be.buffer(Buf::kRouter, R * E);
  be.matmul(w.router, xn, R, logits);
  // The shared expert's gate reads the same input as the router: issued next to it, a device
  // backend runs both products in one launch (the result is the same wherever it is computed).
  float* sg = w.has_shared_expert ? be.buffer(Buf::kMoeGate, R) : nullptr;
  if (w.has_shared_expert) be.matmul(w.shared_expert_gate, xn, R, sg);
  // So do the shared expert's gate and up projections (their own buffers: the routed experts'
  // run in between); its swiglu and down projection stay after the routed experts.
  const ExpertWeights& se = w.shared_expert;
  const int64_t SI = w.has_shared_expert ? se.gate_proj.rows : 0;
  float* sgate = w.has_shared_expert ? be.buffer(Buf::kSharedG, R * SI) : nullptr;
  float* sup = w.has_shared_expert ? be.buffer(Buf::kSharedU, R * SI) : nullptr;
  if (w.has_shared_expert) {
    be.matmul(se.gate_proj, xn, R, sgate);
    be.matmul(se.up_proj, xn, R, sup);
  }
  const MoeRouting route = be.moe_route(logits, R, E, K, c.norm_topk_prob);
  float* xin = be.buffer(Buf::kMoeIn, R * K * H);
  float* gate = be.buffer(Buf::kMoeG, R * K * I);
  float* up = be.buffer(Buf::kMoeU, R * K * I);
  float* out = be.buffer(Buf::kMoeOut, R * K * H);
  be.moe_gather(route, xn, H, xin);
  const GroupedMatmul gate_up[2] = {{w.expert_gate.data(), xin, H, gate, I}, {w.expert_up.data(), xin, H, up, I}};
  be.grouped_matmul(route, gate_up, 2);
  be.swiglu(gate, up, gate, R * K * I);
  const GroupedMatmul down = {w.expert_down.data(), gate, I, out, H};
  be.grouped_matmul(route, &down, 1);
  be.moe_combine(route, out, H, y);
  if (w.has_shared_expert) {
    float* shared = be.buffer(Buf::kMoeOut, R * H);  // the routed outputs are already combined
    be.swiglu(sgate, sup, sgate, R * SI);  // mlp()'s second half
    be.matmul(se.down_proj, sgate, R, shared);
    be.add_sigmoid_scaled(y, shared, sg, R, H);
  }
}

// Every weight the ops below read, for Backend::bind_weights.
WeightSet weight_set(const ModelWeights& W) {
  WeightSet set;
  auto m = [&](const Matrix& x) {
    if (x.data) set.matrices.push_back(x);
  };
  auto v = [&](const std::vector<float>& x) {
    if (!x.empty()) set.vectors.emplace_back(x.data(), x.size());
  };
  auto expert = [&](const ExpertWeights& e) {
    m(e.gate_proj);
    m(e.up_proj);
    m(e.down_proj);
  };
  m(W.embed_tokens);
  m(W.lm_head);
  v(W.final_norm);
  for (const LayerWeights& L : W.layers) {
    v(L.input_layernorm);
    v(L.post_attention_layernorm);
    for (const Matrix* x : {&L.attn.q_proj, &L.attn.k_proj, &L.attn.v_proj, &L.attn.o_proj}) m(*x);
    for (const auto* x : {&L.attn.q_bias, &L.attn.k_bias, &L.attn.v_bias, &L.attn.q_norm, &L.attn.k_norm}) v(*x);
    for (const Matrix* x : {&L.gdn.in_proj_qkv, &L.gdn.in_proj_z, &L.gdn.in_proj_b, &L.gdn.in_proj_a,
                            &L.gdn.in_proj_qkvz, &L.gdn.in_proj_ba, &L.gdn.out_proj})
      m(*x);
    for (const auto* x : {&L.gdn.conv1d, &L.gdn.a_log, &L.gdn.dt_bias, &L.gdn.norm}) v(*x);
    expert(L.ffn.dense);
    m(L.ffn.router);
    for (const auto* t : {&L.ffn.expert_gate, &L.ffn.expert_up, &L.ffn.expert_down})
      for (const Matrix& x : *t) m(x);
    if (L.ffn.has_shared_expert) {
      expert(L.ffn.shared_expert);
      m(L.ffn.shared_expert_gate);
    }
  }
  return set;
}

Status validate(const ModelConfig& c, std::span<const SequenceRows> batch) {
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceRows& seq = batch[s];
    if (!seq.state || seq.n < 0 || (seq.n > 0 && !seq.ids)) return Status::error("forward: malformed batch entry");
    WEFT_RETURN_IF_ERROR(check_token_ids(seq.ids, seq.n, c.vocab_size));
    for (size_t o = 0; o < s; ++o)
      if (batch[o].state == seq.state) return Status::error("forward: a sequence appears twice in one batch");
    if ((seq.state->kv_options().rotates_k() || seq.state->kv_options().rotates_v()) && (c.head_dim & (c.head_dim - 1)) != 0)
      return Status::error("--kv-rotate needs head_dim to be a power of two (Walsh-Hadamard transform); this "
                           "model's head_dim is " + std::to_string(c.head_dim) + " (run without --kv-rotate)");
  }
  return Status();
}

}  // namespace

Status check_token_ids(const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t t = 0; t < n; ++t)
    if (ids[t] < 0 || ids[t] >= vocab)
      return Status::error("token id " + std::to_string(ids[t]) + " at index " + std::to_string(t) +
                           " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  return Status();
}

Status bind_model_weights(const Model& model, Backend& be) {
  const ModelWeights& W = model.weights();
  return be.has_weights(&W) ? Status() : be.bind_weights(&W, weight_set(W));
}

Status forward(const Model& model, Backend& be, std::span<const SequenceRows> batch) {
  const ModelConfig& c = model.config();
  const ModelWeights& W = model.weights();
  WEFT_RETURN_IF_ERROR(validate(c, batch));
  // Weights are bound on first use (a device uploads them, the CPU copies them to huge pages).
  WEFT_RETURN_IF_ERROR(bind_model_weights(model, be));
  // Host-side row tables (ids, positions, output rows), reused across calls.
  thread_local std::vector<int32_t> ids, out_rows;
  thread_local std::vector<int64_t> positions, first;
  thread_local std::vector<float> inv_freq;
  Rows rows;
  rows.seqs = batch;
  ids.clear();
  positions.clear();
  first.clear();
  for (const SequenceRows& seq : batch) {
    first.push_back(rows.total);
    rows.total += seq.n;
    ids.insert(ids.end(), seq.ids, seq.ids + seq.n);
    for (int64_t t = 0; t < seq.n; ++t) positions.push_back(seq.state->position() + t);
  }
  rows.first = first.data();
  const int64_t R = rows.total, H = c.hidden_size, V = c.vocab_size;
  if (R == 0) return Status();
  be.begin_forward(R);

  // RoPE tables for these rows' positions.
  rope_inv_freq(c, &inv_freq);
  const int64_t half = c.rotary_dim / 2;
  float* cos = be.buffer(Buf::kRopeCos, R * half);
  float* sin = be.buffer(Buf::kRopeSin, R * half);
  be.rope_tables(positions.data(), R, inv_freq.data(), half, cos, sin);
  rows.cos = cos;
  rows.sin = sin;

  // Embed.
  float* x = be.buffer(Buf::kX, R * H);
  float* xn = be.buffer(Buf::kXn, R * H);
  float* y = be.buffer(Buf::kY, R * H);
  be.embed(W.embed_tokens, ids.data(), R, x);

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = W.layers[size_t(l)];
    // Token mixer: norm, attention or GDN, residual.
    be.rmsnorm(x, L.input_layernorm.data(), xn, R, H, float(c.rms_norm_eps), c.norm_plus_one);
    if (L.kind == LayerKind::kFullAttention) {
      attention_layer(c, L.attn, l, rows, xn, y, be);
    } else {
      gdn_layer(c, L.gdn, l, rows, xn, y, be);
    }
    be.add(x, y, R * H);
    // Channel mixer: norm, MLP or MoE, residual.
    be.rmsnorm(x, L.post_attention_layernorm.data(), xn, R, H, float(c.rms_norm_eps), c.norm_plus_one);
    if (L.ffn_kind == FfnKind::kMoe) {
      moe_layer(c, L.ffn, R, xn, y, be);
    } else {
      mlp(L.ffn.dense, xn, R, y, be);
    }
    be.add(x, y, R * H);
  }

  // Final norm and output head, on the rows whose logits were asked for.
  out_rows.clear();
  for (size_t s = 0; s < batch.size(); ++s) {
    if (!batch[s].logits || batch[s].n == 0) continue;
    const int64_t first = batch[s].all_logits ? 0 : batch[s].n - 1;
    for (int64_t t = first; t < batch[s].n; ++t) out_rows.push_back(int32_t(rows.first[s] + t));
  }
  if (!out_rows.empty()) {
    const int64_t n_out = int64_t(out_rows.size());
    float* sel = be.buffer(Buf::kLogitsIn, n_out * H);
    float* logits = be.buffer(Buf::kLogits, n_out * V);
    be.gather_rows(x, out_rows.data(), n_out, H, sel);
    be.rmsnorm(sel, W.final_norm.data(), sel, n_out, H, float(c.rms_norm_eps), c.norm_plus_one);
    be.matmul(W.lm_head, sel, n_out, logits);
    int64_t done = 0;
    for (const SequenceRows& seq : batch) {
      if (!seq.logits || seq.n == 0) continue;
      const int64_t n = seq.all_logits ? seq.n : 1;
      be.copy_to_host(seq.logits, logits + done * V, n * V);
      done += n;
    }
  }
  be.end_forward();
  for (const SequenceRows& seq : batch) seq.state->advance(seq.n);
  return Status();
}

int64_t prefill_rows_for_memory(const ModelConfig& c, int64_t budget_bytes) {
  // Floats of scratch per row, from the buffers the layers size (an upper bound: every role at
  // its largest use): residual/normed/output, five projection buffers, RoPE, MoE slots.
  const int64_t H = c.hidden_size, K = std::max<int64_t>(1, c.num_experts_per_tok);
  const int64_t proj = std::max({c.num_attention_heads * c.head_dim * 2, c.gdn_conv_dim() + c.gdn_value_dim(),
                                 c.intermediate_size, c.num_experts, int64_t(1)});
  const int64_t moe = c.num_experts > 0 ? K * (2 * H + 2 * c.moe_intermediate_size) + c.num_experts : 0;
  const int64_t per_row = 4 * (3 * H + 5 * proj + c.rotary_dim + moe + 2 * c.shared_expert_intermediate_size);
  const int64_t rows = std::clamp<int64_t>(budget_bytes / std::max<int64_t>(1, per_row), kPrefillChunk, 4096);
  return rows / kPrefillChunk * kPrefillChunk;
}

int64_t prefill_rows_for_model(const Model& model) {
  constexpr int64_t kBudget = int64_t(1) << 30, kFloor = int64_t(64) << 20;
  const int64_t weights = int64_t(std::min<uint64_t>(compute_footprint(model).total_weight_bytes, uint64_t(kBudget)));
  return prefill_rows_for_memory(model.config(), std::max(kFloor, weights));
}

Status forward(const Model& model, Backend& backend, const SequenceRows& rows) {
  return forward(model, backend, std::span<const SequenceRows>(&rows, 1));
}

}  // namespace weft
