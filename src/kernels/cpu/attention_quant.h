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
//    int8 values); a score is one float FMA chain over the blocks of exact integer dot products,
//    each scaled by d_q·d_k. The integer part is exact, so the vector paths may compute it in any
//    order (VNNI: 8 heads per instruction, lanes = heads) and still give the scalar twin's bits.
//    The cache entries themselves are never re-quantized (they were encoded at append).
//  * Softmax: attn_exp (below), a polynomial exp with the same bits in scalar and vector code.
//  * f16 K (with quantized V): rows are widened to f32 and dotted with FMA.
//  * Quantized V: p·v in integers (pv_quant below). Per tile of kAttnPvKeys keys and 32-value
//    block, each head's weights p·d (probability times the row's block scale) are scaled to 16-bit
//    integers and meet the rows' stored codes in exact int32 sums (VNNI: vpdpwssd, two keys per
//    instruction, the V codes widened once for all heads of the group); one float fma per element
//    and tile adds the sum back. The f32 form (decode each code, one fma per head, key and value)
//    was 48% of a 32K q8_0 call and no faster than f16's, although its rows are half the bytes.
//    The weights' bound is the product of two maxima (the head's largest p over the tile, the
//    block's largest |d| over the tile), so nothing is computed per head and block but the
//    weights themselves; they round by at most 1/65534 of that bound, well under q8_0's own
//    rounding (1/254 of a block's max).
//  * f16 V (with quantized K): rows are decoded once into a small f32 tile, then p·v is
//    accumulated for all heads of the group in float, register-blocked.
//  * The AVX2 and AVX-512 kernels and their scalar twins use the same float operations in the
//    same order (integer work in any order: it is exact), so every path gives bit-identical
//    results (tested set against set).
//
// Error bounds, as max |out − ref| / max |v| (tests/attention_quant_test.cpp: N(0,1) q, k, v,
// scale head_dim^-0.5, contexts 1..1300 and 2100, head_dim 64/128/256, GQA 1/4/8):
//  * kernel error, vs float64 on the *dequantized* cache rows (cache quantization excluded):
//    f16 K with f16 V: bound 1e-5 (seen ~1e-7); f16 K with quantized V: bound 1e-4 (seen up to
//    2.3e-5), the 16-bit p·v weights; q8_0/q4_0 K: bound 2e-2 (seen up to 7.4e-3), which is the
//    query's q8 rounding (≤ 0.4% of each 32-value block's max), not accumulation error.
//  * total error vs float64 on the original values: the sum of a K term (f16 2e-3, q8_0 2.5e-2,
//    q4_0 1.5e-1) and a V term (q8_0 1.5e-2, q4_0 1.5e-1). Seen: q8_0/q8_0 ≤ 6e-3,
//    q4_0/q4_0 ≤ 9.4e-2 (q4_0 is a coarse tier). End to end, --kv q8_0 picks the f16 path's
//    argmax at 100% of teacher-forced positions on every fixture with head_dim % 32 == 0.
//  * The three primitive sets are bit-identical; any thread count gives the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

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

// ---- Internals shared by attention_quant.cpp and the vector primitive sets ----

// One query block: 32 values quantized to int8 with a float scale, and the sum of its codes (for
// the offset corrections: q4_0 keys are stored as value + 8; the VNNI path reads q8_0 keys as
// value + 128).
struct AttnQBlock {
  float d;
  int32_t qsum;
  int8_t qs[32];
};

// The q8 query blocks of up to 8 heads of one GQA group at one block index, laid out for the
// vector paths. Heads past the group are zero (their scores are computed and dropped).
struct AttnQTile {
  int8_t qs[8][32];     // [head][value]: per-head rows (AVX2: maddubs per head)
  int8_t qt[8][8][4];   // [group of 4 values][head][value]: one broadcast 4-code key group meets
                        // those 4 codes of all 8 heads (VNNI: vpdpbusd, lanes = heads)
  float d[8];           // query scale per head
  int32_t bias8[8];     // -8 * qsum: removes q4_0's stored +8
  int32_t bias128[8];   // -128 * qsum: removes the +128 the VNNI path adds to q8_0 keys
};

// The query of one GQA group in every form the primitives use (built once per call or task).
struct AttnGroupQuery {
  const float* qf;         // [group][hd] floats: f16 keys
  const AttnQBlock* qb;    // [group][nb] q8 blocks: the scalar twin
  const AttnQTile* tiles;  // [ceil(group / 8)][nb]: the vector paths
  int64_t group, nb;
};

// exp(x) for the softmax's x = score - max <= 0, with the same bits from the scalar code and the
// vector paths: every step is one IEEE operation or an explicit fma, in this order (Cody-Waite
// reduction by ln 2 in two parts, Cephes' degree-5 polynomial, 2^n through the exponent bits).
// Relative error ~2 ulp. Below -87 it returns exp(-87) ~ 1.6e-38 (2^n stays a normal float;
// nothing that small survives a sum that holds the max's 1); NaN also maps to that floor.
constexpr float kAttnExpMin = -87.0f, kAttnLog2e = 1.44269504088896341f;
constexpr float kAttnLn2Hi = 0.693359375f, kAttnLn2Lo = -2.12194440e-4f;
constexpr float kAttnExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
float attn_exp(float x);  // the scalar twin (attention_quant.cpp); vector twins in the _avx2 file

// Vector primitives: a scalar set, an AVX2 set and an AVX-512 VNNI set with identical results.
struct AttnQuantOps {
  // Scores of the group's heads against keys k0 .. k0+n-1 of kv head g, K in q8_0 or q4_0:
  // s[i*n + j] = scale * acc, acc = fma(float(dot_b), d_q[i][b] * d_k[b], acc) over blocks b in
  // order from acc = 0, where dot_b is the block's integer dot product (exact in any order and
  // exactly representable as a float, |dot_b| < 2^24), so every path gives the same bits.
  void (*scores)(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const AttnGroupQuery& q, float scale,
                 float* s);
  // x[j] = attn_exp(x[j] - m) for j < n; returns their sum: lane j mod 8 over the full groups of
  // 8, lanes reduced (0+4)+(2+6) + (1+5)+(3+7), then the tail added in order.
  float (*exp_sum)(float* x, int64_t n, float m);
  // Decodes n values of a row in `type` (f16, q8_0, q4_0) to f32.
  void (*load_row)(DType type, const uint8_t* row, float* dst, int64_t n);
  // 8-lane FMA dot product, pairwise lane reduction (same order as attention_f16's).
  float (*dot)(const float* a, const float* b, int64_t n);
  // acc[i][d] += Σ_j p[i·p_stride + j] · v[j][d] for j < n (in j order), i < group, d < hd.
  void (*accumulate_v)(const float* v, int64_t n, const float* p, int64_t p_stride, int64_t group,
                       int64_t hd, float* acc);
  // Quantized V (q8_0 / q4_0): acc[i][d] += p·v over the cache's V rows k0..k0+n-1 of kv head g,
  // i < group, in integers (p ≥ 0: softmax weights). Per tile of kAttnPvKeys keys (j0, j0 + 64,
  // ..) and 32-value block b, for each head i, with p_j = p[i·p_stride + j], d_j the row's block
  // scale (f32) and c_j,e its stored codes (q8_0: int8; q4_0: nibble − 8):
  //   h = attn_pv_head_scale(max_j p_j)  (per head and tile);  k = attn_pv_block_scale(max_j |d_j|)
  //   w_j = attn_round_i32((p_j · d_j) · (h.inv · k.inv))    (|w_j| ≤ 32767)
  //   A_e = Σ_j w_j · c_j,e                                 (int32, exact in any order)
  //   acc[i][32b + e] = fma(float(A_e), h.out · k.out, acc[i][32b + e])
  // The maxima are exact in any order. Every path computes these same operations: the same bits.
  void (*pv_quant)(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
                   int64_t group, float* acc);
};

// pv_quant's tile and scale rule. 64 keys keep the int32 sums exact (64 · 32767 · 128 < 2^31) and
// the tile's rows in L1 across its blocks. The weights' bound is a product of two maxima: per head
// and tile (its largest p: inv 32767 / p, out p / 32767) and per block and tile (the largest
// |scale|: inv 1 / d, out d), so the divisions are per head and tile and per block, not per head
// and block. Below the floor a factor is 0 and the tile-block adds nothing: a tile whose weights
// are all under 2^-50 of the chunk's largest (its contribution is far under f32's resolution of
// the sum), or a block of zeros (f16 scales are 0 or >= 2^-24); the products stay finite.
constexpr int64_t kAttnPvKeys = 64;
constexpr float kAttnPvFloor = 0x1p-50f;
struct AttnPvScale {
  float inv, out;
};
inline AttnPvScale attn_pv_head_scale(float pmax) {
  return pmax >= kAttnPvFloor ? AttnPvScale{32767.0f / pmax, pmax / 32767.0f} : AttnPvScale{0.0f, 0.0f};
}
inline AttnPvScale attn_pv_block_scale(float dmax) {
  return dmax >= kAttnPvFloor ? AttnPvScale{1.0f / dmax, dmax} : AttnPvScale{0.0f, 0.0f};
}
// Round to nearest even, as cvtps2dq does under the default MXCSR (lrint: no UB for any input).
inline int32_t attn_round_i32(float x) { return int32_t(std::lrint(x)); }

// The vector sets keep a tile of up to Max heads' accumulators in registers, so a kernel is a
// template on the tile's head count: for_head_tiles walks a GQA group in tiles of Max heads and
// calls f(first_head, std::integral_constant<int, NH>) with the compile-time size of each tile.
template <int N, int Max, typename F>
inline void call_with_heads(int64_t nh, int64_t h, F& f) {
  if constexpr (N == Max) f(h, std::integral_constant<int, Max>{});
  else if (nh == N) f(h, std::integral_constant<int, N>{});
  else call_with_heads<N + 1, Max>(nh, h, f);
}
template <int Max, typename F>
inline void for_head_tiles(int64_t group, F&& f) {
  for (int64_t h = 0; h < group; h += Max) call_with_heads<1, Max>(std::min<int64_t>(Max, group - h), h, f);
}

const AttnQuantOps& attn_quant_ops_scalar();
const AttnQuantOps& attn_quant_ops_avx2();
// The AVX-512 VNNI set (call only where weft::use_avx512_vnni()): the same bits as the other two.
const AttnQuantOps& attn_quant_ops_avx512();

// attention_quant with a given primitive set (tests: each set against the scalar twin).
void attention_quant_with(const AttnQuantOps& ops, const KvLayerView& kv, const AttentionArgs& args,
                          ThreadPool* pool);

}  // namespace weft
