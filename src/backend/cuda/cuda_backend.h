// The CUDA backend's entry points, for the backend factory (src/backend/backend_factory.cpp, the
// only file that knows whether this build has it). The class itself lives in cuda_backend.cu.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "core/status.h"

namespace weft {

// OK when a CUDA GPU is visible; otherwise the reason (no driver, no device, ...).
Status cuda_device_status();
// A backend computing on GPU 0 with one stream; `threads` host threads for host-side work.
std::unique_ptr<Backend> make_cuda_backend(int threads);

}  // namespace weft
