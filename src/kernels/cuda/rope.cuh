// RoPE tables and the per-row preparation of attention inputs (biases, [query | gate] split,
// q/k RMSNorm, rotate-half RoPE, optional Hadamard rotation): Backend::rope_tables and
// Backend::attention_prep on the GPU. Device pointers throughout, except where noted.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace weft::cuda {

// cos/sin[r][i] = cos/sin(float(positions[r]) · inv_freq[i]) (angle in f32, cos/sin in double,
// as transformers); positions and inv_freq are device arrays.
void rope_tables(const int64_t* positions, int64_t rows, const float* inv_freq, int64_t half, float* cos, float* sin,
                 cudaStream_t stream);
// AttentionPrepArgs with every pointer in device memory. Per (row, head) one block; the head's
// q/k norm sums in double with block_sum's fixed order.
void attention_prep(const AttentionPrepArgs& a, cudaStream_t stream);

}  // namespace weft::cuda
