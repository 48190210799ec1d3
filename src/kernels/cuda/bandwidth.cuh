// The GPU memory-bandwidth probe behind CudaBackend::device_bandwidth (see backend.h): what the
// decode kernels' bytes are judged against on a GPU, measured on the GPU's own DRAM.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/backend.h"

namespace weft::cuda {

// Arrays of max(bytes, 8 x the device's L2, 1 GiB), allocated here and freed before returning;
// per trial one device-to-device copy and one read pass (16-byte loads, XOR-folded so the loads
// cannot be dropped), timed with events on `stream`; the best trial of each counts.
DeviceBandwidth measure_device_bandwidth(size_t bytes, int trials, cudaStream_t stream);

}  // namespace weft::cuda
