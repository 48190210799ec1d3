// CPU matrix products of f32 activations with weight matrices kept in their file dtype.
//
// Determinism contract: out[t][n] is one dot product with one fixed summation order, whatever T,
// the tiling, the thread count, or the code path (AVX-512, AVX2 or scalar) that computes it:
//   * 8 lanes; lane j accumulates, in increasing k, fma(w[k], x[k], acc[j]) for k = 8c + j over
//     the full chunks c < K/8 (a single accumulator per lane, starting at +0);
//   * if K % 8 = r != 0, one more chunk where lanes j < r take w[K8+j], x[K8+j] and lanes j >= r
//     take fma(+0, +0, acc[j]);
//   * then s4[i] = acc[i] + acc[i+4], s2[i] = s4[i] + s4[i+2], result = s2[0] + s2[1].
// Speed comes from computing several independent dot products at once (rows x tokens), never
// from splitting one dot product, so the order above holds for every output element. (AVX-512
// keeps the 8 lanes too: one zmm carries two dot products, never two chunks of one.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace weft {

class ThreadPool;

// out[t*ldo + n] = sum_k x[t*ldx + k] * W[n*K + k], for t < T, n < N.
// W: row-major [N, K] in dtype wtype (kF32, kF16 or kBF16), e.g. straight from a memory-mapped
// file; only element alignment is assumed, and no byte outside W is ever read. x, out: f32.
// K >= 1 (any size). pool may be nullptr (single thread). Runs matmul_avx512 when
// weft::use_avx512(), else matmul_avx2 when weft::use_avx2(), else matmul_scalar.
void matmul(DType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
            int64_t T, float* out, int64_t ldo, ThreadPool* pool);

// Scalar reference with the same summation order as the fast path (always compiled).
void matmul_scalar(DType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                   int64_t T, float* out, int64_t ldo, ThreadPool* pool);

// The AVX2/FMA/F16C path. Call only when cpu_features().has_avx2_fma_f16c(); exposed so tests
// can compare it with matmul_scalar bit for bit.
void matmul_avx2(DType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                 int64_t T, float* out, int64_t ldo, ThreadPool* pool);

// True for the weight dtypes that have a kernel (f32, f16, bf16). Weight binding refuses the
// others with a Status; calling any matmul with one anyway is a bug and aborts (WEFT_CHECK),
// never a silent read of the bytes as f32.
bool matmul_supports(DType wtype);

// The AVX-512 F/BW/VL/DQ path. Call only when cpu_features().has_avx512_core(); exposed so
// tests can compare it with matmul_scalar bit for bit.
void matmul_avx512(DType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                   int64_t T, float* out, int64_t ldo, ThreadPool* pool);
// Its prefill rows per task for rows of K weights (64 at K <= 2048: see matmul_avx512.cpp).
int64_t matmul_avx512_prefill_rows(int64_t K);

// The row-task driver both SIMD paths share (matmul.cpp): it splits N into tasks, sends up to
// `streaming_tokens` tokens through `streaming_rows` (the weights stream from memory once per
// task; the AVX2 path runs its one-token kernel per token, the second token reading the task's
// rows from L2; AVX-512 widens each weight once in registers for up to 8 tokens) and more
// through `prefill_rows`, on the pool. Prefill tasks cover `prefill_rows_per_task` rows and,
// when that leaves too few tasks for the pool, a range of tokens each (tasks = row blocks x
// token ranges). Which thread computes an output, and through which kernel, never changes its
// value: every kernel of a path computes each output as the contract's one dot product.
using MatmulRows = void (*)(DType wtype, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, int64_t K,
                            const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo);
void matmul_row_tasks(MatmulRows streaming_rows, MatmulRows prefill_rows, int64_t prefill_rows_per_task,
                      int64_t streaming_tokens, DType wtype, const void* w, int64_t N, int64_t K, const float* x,
                      int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool);
// The SIMD paths with the decode/prefill boundary given instead of the path's own (tests: every
// T through either kernel family).
void matmul_avx2_boundary(int64_t streaming_tokens, DType wtype, const void* w, int64_t N, int64_t K, const float* x,
                          int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool);
void matmul_avx512_boundary(int64_t streaming_tokens, DType wtype, const void* w, int64_t N, int64_t K,
                            const float* x, int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool);
// Up to this many tokens a matmul takes the streaming kernels; more take the prefill kernels,
// which widen each weight once into f32 scratch for all tokens. Per path, because the streaming
// kernels differ: AVX2 runs its one-token kernel per token (bf16 widened by one shuffle per 8
// weights; it wins up to 8 tokens on Zen 3); AVX-512 widens each pair of rows once in registers
// for up to 8 tokens at a time (few_tokens_block in matmul_avx512.cpp), near the FMA peak, and
// beats or ties the prefill kernel up to 32 tokens. Measured with `quant_bench --n 512 --k 2048
// --t T --threads 1` (bf16 from DRAM), ms per call, streaming / prefill kernel: Zen 4 (AVX-512)
// 0.120 / 0.281 at T = 4, 0.146 / 0.278 at 8, 0.262 / 0.364 at 16, 0.474 / 0.574 at 32; the
// H200 host's Xeon 0.19-0.20 / 0.28-0.37 at 4, 0.26-0.28 / 0.38-0.51 at 8, 0.71-0.78 / 0.72-0.73
// at 32 (at 16 threads 0.088 / 0.16-0.21 at 32: 32 streaming tasks instead of 8 prefill ones);
// Zen 3 (AVX2) 0.22 / 0.58 at 2, 0.55 / 0.81 at 8 (docs/results.md §8). WEFT_MATMUL_STREAMING_TOKENS=N
// (0..64) overrides both (benchmarks). Speed only: each output is the same dot product through
// either kernel.
constexpr int64_t kMatmulStreamingTokensAvx2 = 8;
constexpr int64_t kMatmulStreamingTokensAvx512 = 32;
// A path's threshold: WEFT_MATMUL_STREAMING_TOKENS when set, else path_default.
int64_t matmul_streaming_tokens_or(int64_t path_default);
// Whether the AVX-512 streaming kernel serves 2+ tokens with its few-token kernel (default) or
// runs the one-token kernel once per token (WEFT_MATMUL_FEW_TOKENS=0: the kernel before it, for
// A/B runs; any other value is said on stderr and ignored). The same bits either way. Read once.
// (AVX2 always runs its one-token kernel per token: the same few-token tile, 2 rows x 6 tokens in
// its 16 ymm, measured 0.9-1.1x of it at T = 2..8 on Zen 4, its x rows re-read from L2 per chunk.)
bool matmul_few_tokens();
// The threshold of the path matmul() takes (callers that make their own tasks: grouped experts).
int64_t matmul_streaming_tokens();
// Decode tasks cover at least this many weight bytes (MoE expert projections are only 2 MiB), so
// per-task costs (dispatch, the first group's misses) stay small next to the streaming.
constexpr int64_t kMatmulDecodeTaskBytes = int64_t(64) << 10;
// Prefill tasks split the tokens only into ranges of at least this many (each range widens its
// rows again), in multiples of kMatmulPrefillTokenGrain (the AVX-512 token block).
constexpr int64_t kMatmulPrefillMinTokens = 96;
constexpr int64_t kMatmulPrefillTokenGrain = 48;
// Prefill wants at least this many tasks per pool thread (dynamic scheduling evens them out).
constexpr int64_t kMatmulPrefillTasksPerThread = 3;

// Rows per prefill task of the path matmul() takes, for rows of K weights: what a caller that
// makes its own tasks (the grouped expert matmul) should cut its rows into. Speed only.
int64_t matmul_prefill_rows_per_task(int64_t K);

// Output rows per parallel task. Tasks write disjoint rows, and since each output element is
// computed whole by one task, the grain only affects speed, never values.
constexpr int64_t kMatmulRowsPerTask = 16;

}  // namespace weft
