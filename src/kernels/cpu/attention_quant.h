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
//  * V: rows are dequantized once into a small f32 tile, then p·v is accumulated for all heads
//    of the group in float, register-blocked.
//  * The AVX2 and AVX-512 kernels and their scalar twins use the same float operations in the
//    same order, so every path gives bit-identical results (tested set against set).
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
//  * The three primitive sets are bit-identical; any thread count gives the same bits.
#pragma once

#include <algorithm>
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
  // Optional (nullptr: the two steps above): the same acc update straight from the cache's V rows
  // k0..k0+n-1 of kv head g, each value decoded as load_row decodes it, in registers; returns
  // false (and does nothing) for a V type it does not handle.
  bool (*accumulate_v_rows)(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
                            int64_t group, float* acc);
};

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
