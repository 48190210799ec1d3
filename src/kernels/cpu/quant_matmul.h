// Matrix products of f32 activations with GGML block-quantized weights (q8_0, q4_0, q4_K, q5_K,
// q6_K), computed with integer dot products against activations quantized once per token.
//
// Activations: each token's row of x is quantized once per call to 8-bit blocks — q8_0 blocks of
// 32 for q8_0 / q4_0 weights, q8_K blocks of 256 (with exact 16-value sums) for the k-quants —
// by quantize_activations() below (the AVX2 path by its twin, which writes the same bytes).
//
// Determinism contract: out[t][n] is one dot product with one fixed order, whatever T, the thread
// count, or the code path (AVX2 or scalar) that computes it. Integer sums are exact (they never
// overflow or saturate: activation codes are in [-127, 127]), so only the float steps have an
// order, and it is:
//   q8_0, q4_0 (blocks of 32): 8 float lanes, lane j starting at +0; for each block b in order,
//     lane j takes acc[j] = fma(float(I[b][j]), dw[b] * dx[b], acc[j]) where I[b][j] is the exact
//     integer sum of w*x over the block's elements 4j..4j+3 and dw, dx are the block scales (f16
//     widened exactly); then s4[i] = acc[i] + acc[i+4], s2[i] = s4[i] + s4[i+2], s2[0] + s2[1]
//     (the same reduction as matmul.h).
//   q4_K, q5_K (super-blocks of 256 = 8 sub-blocks of 32): 8 float lanes from +0; for each
//     super-block in order, lane j takes
//       S_j = sum_s sc[s] * sum_{i = 4j..4j+3} q[32s+i] * x[32s+i]      (exact, < 2^24)
//       M_j = m[j] * (bsums[2j] + bsums[2j+1])                           (mins of sub-block j)
//       acc[j] = fma(float(S_j), d * dx, acc[j]);  acc[j] = fma(-float(M_j), dmin * dx, acc[j])
//     then the 8-lane reduction above.
//   q6_K (16 sub-blocks of 16, seen as 8 groups g of 32): 8 lanes; per super-block lane j takes
//       S_j = sum_g sc[2g + j/4] * sum_{e = 4j..4j+3} q[32g+e] * x[32g+e]
//             - 32 * (sc[2j] * bsums[2j] + sc[2j+1] * bsums[2j+1])       (exact int32)
//       acc[j] = fma(float(S_j), d * dx, acc[j]);  then the 8-lane reduction.
//   (The lane split is the one _mm256_maddubs_epi16 + _mm256_madd_epi16 produce: int32 lane j
//   holds bytes 4j..4j+3 of a 32-byte vector; the scalar twin computes exactly these integers.
//   The AVX-512 VNNI path keeps it, in 256-bit registers.)
// Threads split output rows into fixed tasks, so the thread count only changes which thread
// computes an output, never its value. float(int) rounds to nearest even on both paths.
//
// Accuracy: the result is the exact dot product of the dequantized weights with the *quantized*
// activations, up to f32 rounding of the float steps above; against the f32 activations it
// differs by at most about sum_b (sum_{i in b} |w_i|) * dx_b / 2, dx_b being the scale of
// activation block b (q8_0 codes are computed against the f32 scale and the scale is stored as f16,
// as ggml does, which adds at most 127 * 2^-11 of dx_b per value to that half step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/quant_types.h"
#include "kernels/cpu/quant_repack.h"

namespace weft {

class ThreadPool;

// out[t*ldo + n] = sum_k W[n, k] * x[t*ldx + k], for t < T, n < N. W: row-major [N, K] in
// `wtype`, rows of ggml_row_bytes(wtype, K) bytes, straight from a memory-mapped file (2-byte
// alignment assumed, no byte outside W read). f32 / f16 / bf16 go to matmul() (matmul.h), the
// block types to the integer kernels. Precondition: K % ggml_block_size(wtype) == 0, K >= 1.
// pool may be nullptr. Uses AVX-512 VNNI when weft::use_avx512_vnni(), else AVX2 when
// weft::use_avx2(); all three paths give the same bits.
void quant_matmul(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                  int64_t T, float* out, int64_t ldo, ThreadPool* pool);
// The scalar twin (always compiled) and the AVX2 path (call only when
// cpu_features().has_avx2_fma_f16c()); exposed so tests can compare them bit for bit.
void quant_matmul_scalar(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                         int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool);
void quant_matmul_avx2(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                       int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool);
// The AVX-512 VNNI path (call only when cpu_features() has AVX-512 F/BW/VL/DQ, VNNI and AVX2):
// bit-identical to the other two.
void quant_matmul_avx512(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                         int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool);

// The same entry points for a matrix stored as `layout` says (quant_repack.h: leading rows in
// x8 groups of a grouped type, as the CPU backend's weight copy stores them); the entry points above
// read plain rows. Every output is the same bits as the plain layout's.
void quant_matmul_with_layout(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                  int64_t T, float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout);
void quant_matmul_scalar_with_layout(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                         int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout);
void quant_matmul_avx2_with_layout(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                       int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout);
void quant_matmul_avx512_with_layout(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                         int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout);

// The same product in two steps, for callers that multiply one set of activations by several
// block-quantized matrices (the grouped expert path: every row task of every expert, and gate and
// up, share a token's activations): quantize_activation_rows writes T rows of
// quant_activation_row_bytes(wtype, K) bytes (the bytes every path uses: quantize_activations),
// and quant_matmul_quantized multiplies them, giving exactly quant_matmul's outputs. wtype must
// be a block type.
size_t quant_activation_row_bytes(GgmlType wtype, int64_t K);
void quantize_activation_rows(GgmlType wtype, const float* x, int64_t ldx, int64_t T, int64_t K, uint8_t* dst);
void quant_matmul_quantized(GgmlType wtype, const void* w, int64_t N, int64_t K, const uint8_t* xq, int64_t T,
                            float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout = {});

// The activation block type a weight type is multiplied against (q8_0 or q8_K).
GgmlType activation_type(GgmlType wtype);
// Quantizes K activations into activation_type(wtype) blocks (ggml_row_bytes of that type).
// Exposed for tests, which compute the exact expected result from the quantized activations.
void quantize_activations(GgmlType wtype, const float* x, int64_t K, uint8_t* dst);
// Its AVX2 twin (call only with AVX2): the same bytes for every input (NaN and inf included),
// used by the AVX2 path, where the scalar quantizer cost ~30% of a q8_0 MoE decode step.
void quantize_activations_avx2(GgmlType wtype, const float* x, int64_t K, uint8_t* dst);

// Output rows per parallel task (prefill); decode tasks grow to cover at least
// kQuantDecodeTaskBytes of weights. Values never depend on either.
constexpr int64_t kQuantRowsPerTask = 16;
constexpr int64_t kQuantDecodeTaskBytes = int64_t(64) << 10;

// How far ahead (bytes) the one-token kernels prefetch their weight stream (quant_simd_rows.h
// says why); WEFT_PREFETCH_AHEAD=bytes (0: none) overrides it for an A/B. Read once per process.
constexpr size_t kPrefetchAhead = 2048;
size_t quant_prefetch_ahead();

// One dot-product kernel: out[t * ldo + r] = weight row r (of `rows` consecutive rows, row_bytes
// apart, starting at w) times token t's quantized activations (xq + t * xq_stride), for
// r < rows, t < ntok. Each output is computed by the same operations whatever ntok is.
using QuantDotRowsFn = void (*)(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq,
                                size_t xq_stride, int64_t ntok, int64_t K, float* out, int64_t ldo);
QuantDotRowsFn quant_dot_rows_scalar(GgmlType wtype);  // nullptr for plain types
QuantDotRowsFn quant_dot_rows_avx2(GgmlType wtype);
QuantDotRowsFn quant_dot_rows_avx512(GgmlType wtype);

// The grouped-layout kernel (quant_repack.h): out[t * ldo + 8g + r] = row r of group g (groups
// kX8GroupRows * row_bytes apart from w) times token t, for g < groups. The same bits as the
// row kernels on the plain rows. Only the AVX-512 path has one (nullptr otherwise, and for types
// without groups); the others run quant_dot_groups_via_rows.
using QuantDotGroupsFn = void (*)(const uint8_t* w, size_t row_bytes, int64_t groups, const uint8_t* xq,
                                  size_t xq_stride, int64_t ntok, int64_t K, float* out, int64_t ldo);
QuantDotGroupsFn quant_dot_groups_avx512(GgmlType wtype);
// Any row kernel on grouped rows: each group unpacked to its plain rows (in a per-thread scratch),
// then `rows` on them. This is the scalar twin of the grouped kernels (with the scalar rows).
void quant_dot_groups_via_rows(GgmlType wtype, QuantDotRowsFn rows, const uint8_t* w, size_t row_bytes, int64_t groups,
                               const uint8_t* xq, size_t xq_stride, int64_t ntok, int64_t K, float* out, int64_t ldo);

}  // namespace weft
