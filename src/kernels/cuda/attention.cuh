// CUDA attention over the paged KV cache, and the append that fills it.
//
// The host-side interface the CUDA backend calls (plain C++, includable from .cpp and .cu files).
// Pointer rules: `calls` and `layer` are host structs; every pointer *inside* them is device
// memory — args.q / args.out, and kv.pages, a device array of device page pointers laid out
// exactly as src/kernels/kv_view.h says ([K: n_kv x page_tokens rows][V: n_kv x page_tokens rows]).
//
// Semantics are Backend::attention's: causal, query row t at position args.pos0 + t sees cache
// rows [0, pos0 + t]; head h reads kv head h / (n_heads / n_kv_heads); out = softmax(scale·q·kᵀ)·v.
//
// Determinism (the strict tier): the context of every query row is cut into splits of a fixed
// number of keys (kAttnSplitKeys), each split gives a partial softmax state, and the partials are
// folded in a fixed tree: left to right inside groups of 16 consecutive splits, then the groups
// left to right. The split size, the tile order inside a split and the fold order depend on
// nothing but the row's own position, so a call's output is bit-identical run to
// run and whatever else is in the batch; a verify call (T = k+1 rows) or a prefill call gives
// each row exactly the bits a decode call at that position gives.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "kernels/kv_view.h"

namespace weft::cuda {

// Keys per split (see above). Fixed, never derived from the batch or the device.
constexpr int64_t kAttnSplitKeys = 256;

// Device scratch bytes `attention` needs for these calls (0 is possible).
size_t attention_workspace_bytes(const AttentionCall* calls, int64_t n);

// Runs the calls on `stream` (asynchronous; no host synchronisation, capturable in a CUDA graph).
// `workspace`: device memory of at least attention_workspace_bytes(calls, n) bytes, not used by
// anything else until the work on `stream` is done. The kernel is chosen per call by
// kv.k_type / kv.v_type: f16 K and V take the dim-parallel split kernel (attention_split.cu);
// a quantized K or V (q8_0 / q4_0, any mix, with f16 too) the key-parallel kernel of
// attention_qkeys.cu, compiled per K/V type pair; anything else (an f32 cache, a page size that is not a multiple of 32, another head size) a simple
// reference kernel.
//
// FROZEN: the f16 decode kernel (the dim-parallel split kernel with its default launch shape, and
// the merge) is frozen as of issue 11's round 4: its results are the strict tier's GPU bits. New
// KV types or faster quantized paths are kernels beside it, selected by the KV types; a change to
// its arithmetic is a new kernel, not an edit.
void attention(const AttentionCall* calls, int64_t n, void* workspace, cudaStream_t stream);

// Writes T rows of K and V (device f32 [T, n_kv, head_dim]) at positions [pos0, pos0 + T) of the
// layer `layer` describes (its page table must already cover them: layer.length >= pos0 + T;
// pages writable), encoded to layer.k_type / v_type bit for bit as the CPU's encode_kv_row does
// (f32, f16, q8_0, q4_0; src/kernels/cpu/kv_quant.h).
void kv_append(const KvLayerView& layer, int64_t pos0, const float* k, const float* v, int64_t T,
               cudaStream_t stream);

}  // namespace weft::cuda
