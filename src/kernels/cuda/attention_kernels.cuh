// Internal interface between the attention dispatcher (attention.cu) and its kernels
// (attention_simple.cu, attention_split.cu, attention_qkeys.cu). Host functions only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace weft::cuda::detail {

// The reference kernel: any KV type (f32/f16/q8_0/q4_0), any page size, head_dim <= 512.
// One thread block per (query row, head), keys in order with an online softmax. Slow; the
// fallback for what the split kernel does not cover, and a second opinion in tests.
bool simple_supports(const AttentionCall& c);
void attention_simple(const AttentionCall& c, cudaStream_t stream);

// The tiled split kernel (attention_split.cu): f16 / q8_0 / q4_0 K and V (any mix), head_dim
// 64, 128 or 256, GQA group <= 16, page_tokens % 32 == 0, page bases 16-byte aligned.
bool split_supports(const AttentionCall& c);
// Workspace bytes of one call (its split partials; 0 when the call folds in-block).
size_t split_workspace_bytes(const AttentionCall& c);
// Runs calls[0..n) (all split_supports), call i using workspace + offsets[i].
void attention_split(const AttentionCall* calls, const size_t* offsets, int64_t n, uint8_t* workspace,
                     cudaStream_t stream);

// The key-parallel kernel (attention_qkeys.cu, issue 11 rounds 6-7): f16 / q8_0 / q4_0 K and V
// (any mix; compiled per K/V type pair), head_dim 64, 128 or 256, any GQA group, page_tokens %
// 32 == 0, page bases 16-byte aligned. Same split size, partial layout and fold tree as the split
// kernel, other bits (another kernel). It replaced round 4's attention_keys.cu in round 7.
bool qkeys_supports(const AttentionCall& c);
size_t qkeys_workspace_bytes(const AttentionCall& c);
void attention_qkeys(const AttentionCall* calls, const size_t* offsets, int64_t n, uint8_t* workspace,
                     cudaStream_t stream);

// Folds the split partials ([T·n_heads][n_splits][hd + 2]: O, m, l) of calls[which[0..n_which)]
// into their outputs in the fixed two-level order (both tiled kernels write that layout).
void merge_partials(const AttentionCall* calls, const size_t* offsets, const int64_t* which, int64_t n_which,
                    uint8_t* workspace, cudaStream_t stream);

// Launch shape of the tiled kernels, process-wide; benchmarks sweep it, everything else keeps the
// defaults. max_stages, smem_target and blocks_per_sm never change a result (the split size and
// the fold order are fixed); `wide` picks the warp count, which fixes the order the warps'
// partial scores are added in: another (equally deterministic) kernel.
struct SplitTuning {
  int max_stages = 4;              // cp.async pipeline depth limit (2..4)
  size_t smem_target = 113 * 1024;  // shared memory per block the depth may grow to (113 KiB: 2 blocks/SM)
  int blocks_per_sm = 2;            // blocks per SM a long call is spread over (splits per block)
  bool wide = true;                 // head_dim 256: 8 warps (a warp per 32 dims), else 4 warps
  // Quantized K/V decoded from the raw tile straight into MMA fragments (warp slices of whole
  // 32-value blocks) instead of through an f16 tile in shared memory. Changes the dim order of
  // the dot products (another, equally deterministic kernel), so it is not a launch shape.
  bool direct = true;
  // Which tiled kernel a call takes (the KV types select it; the flag keeps the other reachable
  // for benchmarks and tests): the key-parallel kernel (attention_qkeys.cu) for calls with a
  // quantized K or V (keys_quant) and for f16 K and V (keys_f16); otherwise the dim-parallel
  // split kernel. max_stages applies to both.
  // The f16 default is the dim-parallel kernel (faster for f16 rows, measured side by side in
  // docs/results.md section 9), frozen as the strict f16 decode kernel.
  bool keys_quant = true;
  bool keys_f16 = false;
  // The round-6 kernel's decode / verify calls run its software-pipelined loop (scores of sub-tile
  // j next to Oᵀ += Vᵀ·Pᵀ of j - 1); false runs one sub-tile after the other. The same arithmetic
  // in the same order: the same bits (a test checks it).
  bool qkeys_pipelined = true;
  // The pipelined loop compiled for 3 blocks per SM (168 registers) where it fits without spills
  // (quantized K, q8_0 V); false: for 2 blocks per SM. The same arithmetic: the same bits (a test
  // checks it). Measured slower at every depth (issue 11 round 7: q8_0 65.1 vs 60.8 µs at 128K),
  // so off; kept as a launch shape for the benchmark's sweep.
  bool qkeys_pipe3 = false;
  // The pipelined loop reads a q8_0 V (head_dim 256) as words realigned by a byte permute instead
  // of as 16-bit byte pairs (half the shared loads); the same values: the same bits (the
  // pipelined-vs-plain test checks it). Measured no faster (issue 11 round 7: q8_0 62.1 vs 61.2 µs
  // at 128K, 27.4 vs 26.7 at 32K), so off; kept as a shape for the benchmark's sweep.
  bool qkeys_vwords = false;
  // The round-6 kernel's partials are folded by its own copy of the merge kernel, launched with
  // programmatic dependent launch when cuda::pdl_enabled() (the same fold, the same bits); false:
  // the same merge kernel, plain launch (since round 8; before, the split kernels' merge kernel).
  bool qkeys_pdl_merge = true;
  // The key-parallel kernel loads its block's query before the first page pointer and copies, so
  // the two latencies overlap; false: after the first copies (the order so far). The same values:
  // the same bits (the pipelined-vs-plain test runs both). Off until that test has run on a GPU;
  // the sweep timed it 1.03x (q8_0) / 1.08x (q4_0) faster at 32K on an H100 (results 10).
  bool qkeys_early_query = false;
  // Key-parallel kernel: ring depth within keys_smem_target (75 KiB: three blocks per SM, the
  // most its 168 registers allow), runs of splits for keys_blocks_per_sm blocks per SM (at most
  // as many as fit).
  size_t keys_smem_target = 75 * 1024;
  int keys_blocks_per_sm = 4;
};
void set_split_tuning(const SplitTuning& t);
SplitTuning split_tuning();

// Checks what every kernel relies on (shapes, positions inside the cache); throws
// std::invalid_argument with a clear message otherwise.
void validate_call(const AttentionCall& c);

}  // namespace weft::cuda::detail
