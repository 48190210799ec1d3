// The device side of the MoE routing (moe_route.cuh's function, step for step), shared by the
// routing kernels and by the one-token product that routes in its last block (matmul.cu).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_route.cuh"

namespace weft::cuda {
namespace {

constexpr int kTopkThreads = 256;
constexpr int kMaxK = 64;

// (w, o) beats (v, e): larger probability, or the same probability and a lower expert id — the
// CPU's partial_sort comparator; a total order on distinct ids (NaN beats nothing).
__device__ __forceinline__ bool beats(float w, int o, float v, int e) { return w > v || (w == v && o < e); }

__device__ float block_max(float m) {
  __shared__ float wm[32];
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) wm[warp] = m;
  __syncthreads();
  m = wm[0];
  for (int w = 1; w < n_warps; ++w) m = fmaxf(m, wm[w]);
  return m;
}

// Row `r`: softmax in place, then the top k by rank. `shared`: 2E floats. Returns the chosen
// experts in slot order (shared memory, valid after a barrier).
__device__ const int* topk_row(float* shared, int64_t r, float* logits, int E, int K, bool renormalize,
                         int32_t* slot_expert, float* slot_weight) {
  float* p = shared;      // probabilities
  __shared__ float inv;
  __shared__ int chosen[kMaxK];
  float* row = logits + r * E;
  float m = -INFINITY;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    p[e] = __ldcg(row + e);  // L2: the routing may run in the block that finishes a product last
    m = fmaxf(m, p[e]);
  }
  m = block_max(m);
  for (int e = threadIdx.x; e < E; e += blockDim.x) p[e] = float(exp(double(p[e] - m)));
  __syncthreads();
  if (threadIdx.x == 0) {  // the CPU's sum: double, in increasing expert id
    // Four probabilities per shared-memory load, added one at a time in the same order: the
    // unrolled loads run ahead of the dependent adds, where a load per add made the chain wait
    // on shared-memory latency at each of E experts (this thread alone: the step's serial part).
    double s = 0;
    int e = 0;
    if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll 8
      for (; e + 4 <= E; e += 4) {
        const float4 v = *reinterpret_cast<const float4*>(p + e);
        s += v.x;
        s += v.y;
        s += v.z;
        s += v.w;
      }
    }
    for (; e < E; ++e) s += p[e];
    inv = float(1.0 / s);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float v = p[e] * inv;
    p[e] = v;
    row[e] = v;
  }
  __syncthreads();
  // Top k by rank, all threads at once: expert e's rank is the number of experts that beat it in
  // `beats`' total order (larger probability, ties to the lower id), so ranks are distinct
  // and slot j gets the expert of rank j — the order k rounds of argmax would give (and the CPU's
  // partial_sort), in one pass instead of k dependent rounds. A NaN probability is never chosen.
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float v = p[e];
    if (v != v) continue;
    // Eight rivals per step with the exit test between steps: the loads of a step issue
    // together. Stopping later than at rank K changes nothing: only rank < K is used, and a
    // rank below K is only ever final (counted over all E).
    int rank = 0, o = 0;
    for (; o + 8 <= E && rank < K; o += 8) {
#pragma unroll
      for (int u = 0; u < 8; ++u) rank += beats(p[o + u], o + u, v, e) ? 1 : 0;
    }
    for (; o < E && rank < K; ++o) rank += beats(p[o], o, v, e) ? 1 : 0;
    if (rank < K) chosen[rank] = e;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0;
    for (int j = 0; j < K; ++j) sum += p[chosen[j]];
    const int64_t s0 = r * K;
    for (int j = 0; j < K; ++j) {
      slot_expert[s0 + j] = chosen[j];
      slot_weight[s0 + j] = renormalize ? float(p[chosen[j]] / sum) : p[chosen[j]];
    }
  }
  return chosen;
}

// Inclusive warp scan of three integer counters (integer sums: any order gives the same value).
__device__ __forceinline__ void warp_scan3(int& a, int& b, int& c) {
  const int lane = threadIdx.x % 32;
  for (int off = 1; off < 32; off <<= 1) {
    const int oa = __shfl_up_sync(0xffffffffu, a, off), ob = __shfl_up_sync(0xffffffffu, b, off),
              oc = __shfl_up_sync(0xffffffffu, c, off);
    if (lane >= off) a += oa, b += ob, c += oc;
  }
}

// One block: counting sort of the slots by expert (stable), the expert ranges, the token tiles.
// `ints`: 3E shared ints.
__device__ void group_slots(int32_t* ints, const int32_t* slot_expert, int S, int E, int32_t* expert_begin,
                            int32_t* sorted_slot, int32_t* slot_pos, int32_t* tile_expert, int32_t* tile_t0,
                            int32_t* n_tiles, long long* experts_touched) {
  int32_t* count = ints;         // [E]
  int32_t* begin = ints + E;     // [E]
  int32_t* tile0 = ints + 2 * E; // [E]
  __shared__ int warp_tot[3][32];
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < S; i += blockDim.x) atomicAdd(&count[slot_expert[i]], 1);
  __syncthreads();
  // Exclusive scan over experts: thread t owns the contiguous experts [e0, e1).
  const int per = (E + blockDim.x - 1) / blockDim.x;
  const int e0 = min(E, int(threadIdx.x) * per), e1 = min(E, e0 + per);
  int rows = 0, tiles = 0, used = 0;
  for (int e = e0; e < e1; ++e) rows += count[e], tiles += (count[e] + kMoeTileRows - 1) / kMoeTileRows, used += count[e] != 0;
  const int own_rows = rows, own_tiles = tiles;
  warp_scan3(rows, tiles, used);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  if (lane == 31) warp_tot[0][warp] = rows, warp_tot[1][warp] = tiles, warp_tot[2][warp] = used;
  __syncthreads();
  int base_rows = 0, base_tiles = 0, total_rows = 0, total_tiles = 0, total_used = 0;
  for (int w = 0; w < n_warps; ++w) {
    if (w < warp) base_rows += warp_tot[0][w], base_tiles += warp_tot[1][w];
    total_rows += warp_tot[0][w], total_tiles += warp_tot[1][w], total_used += warp_tot[2][w];
  }
  int r = base_rows + rows - own_rows, t = base_tiles + tiles - own_tiles;
  for (int e = e0; e < e1; ++e) {
    begin[e] = r, tile0[e] = t;
    expert_begin[e] = r;
    r += count[e];
    t += (count[e] + kMoeTileRows - 1) / kMoeTileRows;
  }
  if (threadIdx.x == 0) {
    expert_begin[E] = total_rows;
    *n_tiles = total_tiles;
    *experts_touched += total_used;
  }
  __syncthreads();
  // Each expert places its slots in increasing slot order (stable) and writes its tiles.
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const int c = count[e];
    if (c == 0) continue;
    int pos = begin[e];
    for (int i = 0; i < S && pos < begin[e] + c; ++i)
      if (slot_expert[i] == e) {
        sorted_slot[pos] = i;
        slot_pos[i] = pos;
        ++pos;
      }
    for (int t0 = 0; t0 < c; t0 += kMoeTileRows) {
      tile_expert[tile0[e] + t0 / kMoeTileRows] = e;
      tile_t0[tile0[e] + t0 / kMoeTileRows] = t0;
    }
  }
}

// One row (decode), one block of kTopkThreads threads: top-k, then the grouping. `shared`: 3E
// floats (dynamic shared memory).
__device__ void route_one_row(float* shared, float* logits, int E, int K, bool renormalize, const MoeRouteOut& out) {
  const int* chosen = topk_row(shared, 0, logits, E, K, renormalize, out.slot_expert, out.slot_weight);
  __syncthreads();
  // The grouping reads the chosen experts from shared memory (the same values thread 0 stored).
  group_slots(reinterpret_cast<int32_t*>(shared), chosen, K, E, out.expert_begin, out.sorted_slot,
              out.slot_pos, out.tile_expert, out.tile_t0, out.n_tiles, out.experts_touched);
}

}  // namespace
}  // namespace weft::cuda
