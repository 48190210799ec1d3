// MoE routing computed on the host: softmax, top-k (ties to the lower id), optional
// renormalisation, then the counting sort of the (row, expert) slots by expert. The CPU backend
// routes with it in place; the CUDA backend routes on the device with the same function
// (kernels/cuda/moe_route.cuh), which tests/backend_cuda_test.cu checks against this one.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace weft {

struct MoeRoutingHost {
  std::vector<int32_t> expert_begin, sorted_slot, slot_pos, slot_expert, order;
  std::vector<float> slot_weight;
};

// Softmax of logits [rows, E] in place, then routing into *out; the result points into *out.
MoeRouting route_on_host(float* logits, int64_t rows, int64_t E, int64_t K, bool renormalize, MoeRoutingHost* out,
                         BackendCounters* counters);

}  // namespace weft
