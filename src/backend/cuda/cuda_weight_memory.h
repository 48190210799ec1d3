// The CUDA WeightMemory (backend/weight_memory.h): synthetic weights allocated with cudaMalloc and
// generated there by kernels/cuda/synth_fill.cuh, so a model of any size costs no host memory and
// no upload. For the backend factory (the only file that knows whether this build has CUDA).
#pragma once

#include <memory>

#include "backend/weight_memory.h"

namespace weft {

// GPU 0's memory (the device the CUDA backend computes on).
std::unique_ptr<WeightMemory> make_cuda_weight_memory();

}  // namespace weft
