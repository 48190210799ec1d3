// The key-parallel (quantized-KV) attention kernel's split tree at long context (issue 11, round 8),
// shared by its kernel, its merge and its host side (attention_qkeys*.cu), and the switches a
// benchmark or test uses to compare it with round 7's fixed splits.
//
// Why: at 128K a row had 512 splits of kAttnSplitKeys (256) keys, i.e. 512 partials of
// head_dim + 2 floats per query head (8.5 MB per call at 16 heads, head_dim 256) written by the
// split kernel and read back by the merge, four end-of-split folds per block, and a merge whose
// last step folds 32 groups one after the other. Since round 8 a row of the key-parallel kernel
// keeps its 256-key *sub-splits* (the unit of the work split and of the masks) but folds its
// warps' states into a partial only every G sub-splits, where G (a power of two) is the smallest
// that leaves the row at most kQMaxParts partials: G = 1 up to 32K keys (the tree of round 7),
// 2 to 64K, 4 to 128K, 8 to 256K. G is a function of the row's own key count (its position), so
// decode, verify and prefill rows still agree bit for bit and nothing depends on the batch or on
// the launch shape (runs of sub-splits are whole multiples of the call's largest G).
// kQMaxParts = 128: then the merge folds at most 8 groups of kFoldGroup partials, and a call of
// 2 kv heads still spreads over 256 blocks (two per SM on 132 SMs) at every depth from 32K on.
// The frozen f16 kernel (attention_split.cu) keeps its fixed 256-key splits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "kernels/cuda/attention.cuh"

namespace weft::cuda::detail {

constexpr int kQMaxParts = 128;  // partials per row at most (long splits on)

// 256-key sub-splits of a row that sees n keys.
__host__ __device__ constexpr int qkeys_sub_splits(int n) { return int((n + kAttnSplitKeys - 1) / kAttnSplitKeys); }
// Sub-splits per partial of that row: 1, or with cap > 0 the smallest power of two that leaves it
// at most `cap` partials. cap = 0: round 7's tree (a partial per sub-split).
__host__ __device__ constexpr int qkeys_split_group(int n, int cap) {
  const int ns = qkeys_sub_splits(n);
  int g = 1;
  if (cap > 0)
    while ((ns + g - 1) / g > cap) g *= 2;
  return g;
}
// Partials of that row.
__host__ __device__ constexpr int qkeys_parts(int n, int cap) {
  const int g = qkeys_split_group(n, cap);
  return (qkeys_sub_splits(n) + g - 1) / g;
}

// Round 8's long splits (default on; WEFT_CUDA_ATTN_LONG_SPLITS=0 in the environment turns them off
// for the whole process, read once) or round 7's fixed 256-key splits. Process-wide, like
// SplitTuning: benchmarks and tests flip it to compare both trees in one run.
bool qkeys_long_splits();
void set_qkeys_long_splits(bool on);

// Benchmarks only: the key-parallel calls' split kernel and / or merge alone (run_split, run_merge),
// so their times can be told apart; with both it is attention_qkeys. The merge alone folds
// whatever partials the workspace holds (a split-kernel run of the same calls before it).
void attention_qkeys_parts(const AttentionCall* calls, const size_t* offsets, int64_t n, uint8_t* workspace,
                           cudaStream_t stream, bool run_split, bool run_merge);

}  // namespace weft::cuda::detail
