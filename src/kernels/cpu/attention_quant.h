// Attention over a quantized KV cache (K and V each q8_0, q4_0 or f16; not both f16, which is
// the frozen strict kernel's job). Same contract as attention_f16 (attention.h): decode (T == 1)
// and prefill (T > 1, token t at position pos0 + t), causal, GQA.
//
// How it works (and why):
//  * Work split: decode tasks are (kv head, chunk of kAttnChunk keys); prefill tasks are
//    (query token, kv head) walking its keys chunk by chunk. Each chunk gives a partial softmax
//    state (max, sum, accumulator); partials merge by log-sum-exp in chunk order. The split
//    never depends on the thread count, so outputs are bit-identical for any pool size.
//  * Every K and V row is fetched from the cache once per task and used for all query heads of
//    its GQA group (up to 8 for Qwen3.5-35B-A3B): the group's heads are processed together.
//  * Quantized K: the query is quantized once per call to q8 blocks (32 values: float scale,
//    int8 values) and scores are integer dot products per block, scaled by d_q·d_k in float.
//    The cache entries themselves are never re-quantized (they were encoded at append).
//  * f16 K (with quantized V): rows are widened to f32 and dotted with FMA.
//  * V: rows are dequantized once into a small f32 tile, then p·v is accumulated for all heads
//    of the group in float, register-blocked.
//  * The AVX2 kernels and their scalar twins use the same lane structure and summation order,
//    so the two paths give bit-identical results (tested).
//
// Error bounds, as max |out − ref| / max |v| (tests/attention_quant_test.cpp: N(0,1) q, k, v,
// scale head_dim^-0.5, contexts 1..1300 and 2100, head_dim 64/128/256, GQA 1/4/8):
//  * kernel error, vs float64 on the *dequantized* cache rows (cache quantization excluded):
//    f16 K: bound 1e-5 (seen ~1e-7); q8_0/q4_0 K: bound 2e-2 (seen up to 7.4e-3), which is the
//    query's q8 rounding (≤ 0.4% of each 32-value block's max), not accumulation error.
//  * total error vs float64 on the original values: the sum of a K term (f16 2e-3, q8_0 2.5e-2,
//    q4_0 1.5e-1) and a V term (q8_0 1.5e-2, q4_0 1.5e-1). Seen: q8_0/q8_0 ≤ 6e-3,
//    q4_0/q4_0 ≤ 9.4e-2 (q4_0 is a coarse tier). End to end, --kv q8_0 picks the f16 path's
//    argmax at 100% of teacher-forced positions on every fixture with head_dim % 32 == 0.
//  * The AVX2 path and the scalar twin are bit-identical; any thread count gives the same bits.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/kv_view.h"

namespace weft {

class ThreadPool;

// True when attention_quant handles this layer: K, V in {q8_0, q4_0, f16}, not both f16,
// head_dim a multiple of 32.
bool attention_quant_supports(const KvLayerView& kv);

// Chooses the AVX-512 VNNI primitives when weft::use_avx512_vnni(), the AVX2 ones when
// weft::use_avx2(), else the scalar twins (all three give the same bits).
void attention_quant(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool);
// The scalar reference twin (always compiled; for tests).
void attention_quant_scalar(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool);

// ---- Internals shared by attention_quant.cpp and attention_quant_avx2.cpp ----

// One query block: 32 values quantized to int8 with a float scale. lane_sum8[k] holds
// 8 · (q[4k] + q[4k+1] + q[4k+2] + q[4k+3]): the offset correction of q4_0 keys (stored 0..15
// for values −8..7) in the per-lane form of the integer dot product.
struct AttnQBlock {
  float d;
  int32_t lane_sum8[8];
  int8_t qs[32];
};

// Vector primitives; a scalar set and an AVX2 set with identical arithmetic.
struct AttnQuantOps {
  // s[i] = Σ_blocks d_q·d_k·(integer dot of block) for heads i < group; q is [group][nb].
  // Per block the int32 lanes hold 4 consecutive products each; lanes are accumulated in float
  // (fma) across blocks and reduced pairwise at the end: (0+4)+(2+6) + (1+5)+(3+7).
  void (*scores_q8)(const uint8_t* k_row, const AttnQBlock* q, int64_t group, int64_t nb, float* s);
  void (*scores_q4)(const uint8_t* k_row, const AttnQBlock* q, int64_t group, int64_t nb, float* s);
  // Decodes n values of a row in `type` (f16, q8_0, q4_0) to f32.
  void (*load_row)(DType type, const uint8_t* row, float* dst, int64_t n);
  // 8-lane FMA dot product, pairwise lane reduction (same order as attention_f16's).
  float (*dot)(const float* a, const float* b, int64_t n);
  // acc[i][d] += Σ_j p[i·p_stride + j] · v[j][d] for j < n (in j order), i < group, d < hd.
  void (*accumulate_v)(const float* v, int64_t n, const float* p, int64_t p_stride, int64_t group,
                       int64_t hd, float* acc);
  // Optional (nullptr: the two steps above): the same acc update straight from the cache's V rows
  // k0..k0+n-1 of kv head g, each value decoded as load_row decodes it, in registers; returns
  // false (and does nothing) for a V type it does not handle.
  bool (*accumulate_v_rows)(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
                            int64_t group, float* acc);
};

const AttnQuantOps& attn_quant_ops_avx2();
// The AVX-512 VNNI set (call only where weft::use_avx512_vnni()): the same bits as the other two.
const AttnQuantOps& attn_quant_ops_avx512();

}  // namespace weft
