// MoE row movement on the GPU: gathering each (row, expert) slot's input in expert-sorted order
// and combining the experts' outputs per row. The arrays come from the device-side routing
// (moe_route.cuh), the same function as the CPU's (backend/moe_route_host.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::cuda {

// dst[i] = x[sorted_slot[i] / k] for i < n_slots.
void moe_gather(const int32_t* sorted_slot, int64_t n_slots, int64_t k, const float* x, int64_t width, float* dst,
                cudaStream_t stream);
// y[row] = Σ_j weight[slot]·out[slot_pos[slot]] over the row's k slots in increasing expert id
// (ties by slot), starting from 0 — the CPU's order.
void moe_combine(const int32_t* slot_expert, const float* slot_weight, const int32_t* slot_pos, int64_t rows,
                 int64_t k, const float* out, int64_t width, float* y, cudaStream_t stream);

}  // namespace weft::cuda
