// MoE routing on the GPU: softmax over the router logits, top-k, optional renormalisation, and the
// grouping of the (row, expert) slots by expert — everything Backend::moe_route promises, with no
// host round trip, so a decode step never waits for the host and can be replayed as a CUDA graph.
//
// The same function as the CPU's route_on_host (src/backend/moe_route_host.cpp), step for step:
// max by fmax; p = exp(x − max) rounded to f32 (computed in double, so p is the correctly rounded
// value, within an ulp of the CPU's expf); Σp in double in increasing expert id; p *= f32(1/Σ);
// top-k by (p descending, id ascending) — ties go to the lower id; renormalised weights
// f32(p / Σ_top p) with the sum in double in selection order. Slots stay in increasing order
// inside an expert. Deterministic: no atomics decide any value, every sum has one order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::cuda {

// Token tiles of the expert-grouped matmul: tile i covers sorted rows
// [begin[expert[i]] + t0[i], +8) of expert expert[i]. At most moe_max_tiles(rows, k, E) tiles.
constexpr int kMoeTileRows = 8;
inline int64_t moe_max_tiles(int64_t rows, int64_t k, int64_t n_experts) {
  const int64_t slots = rows * k;
  return (slots + kMoeTileRows - 1) / kMoeTileRows + (slots < n_experts ? slots : n_experts);
}

// Device outputs of one routing (all sized by the caller).
struct MoeRouteOut {
  int32_t* slot_expert = nullptr;   // [rows·k]
  float* slot_weight = nullptr;     // [rows·k]
  int32_t* expert_begin = nullptr;  // [E + 1]
  int32_t* sorted_slot = nullptr;   // [rows·k]
  int32_t* slot_pos = nullptr;      // [rows·k]
  int32_t* tile_expert = nullptr;   // [moe_max_tiles]
  int32_t* tile_t0 = nullptr;       // [moe_max_tiles]
  int32_t* n_tiles = nullptr;       // [1]
  long long* experts_touched = nullptr;  // [1], += experts given at least one row (a running count)
};

// logits [rows, E] (device) become the softmax probabilities in place, as on the CPU.
void moe_route(float* logits, int64_t rows, int64_t n_experts, int64_t k, bool renormalize, const MoeRouteOut& out,
               cudaStream_t stream);

}  // namespace weft::cuda
