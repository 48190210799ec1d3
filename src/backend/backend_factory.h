// The one place that knows which backends this build has: `--device cpu|cuda` becomes a Backend
// here. Engine and Session hold whatever this returns.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/weight_memory.h"
#include "core/status.h"

namespace weft {

enum class Device { kCpu, kCuda };

// "cpu" / "cuda" -> Device; the error lists the accepted names.
Result<Device> parse_device(const std::string& name);
const char* device_name(Device device);

// OK when `device` can run here; otherwise why not ("this build has no CUDA backend", "no CUDA
// GPU is visible: ..."). Commands check this before building anything.
Status check_device(Device device);

struct BackendOptions {
  Device device = Device::kCpu;
  int threads = 0;  // host threads (0: one per hardware thread)
};

Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options);
// Where a model made in-process (a synthetic model: synth_in_memory) keeps its weights on
// `options.device`: host memory for the CPU, GPU memory filled by a kernel for CUDA (no host copy,
// no upload). Fails as make_backend does when the device cannot run here.
Result<std::unique_ptr<WeightMemory>> make_weight_memory(const BackendOptions& options);
// For constructors (Engine, Session), whose callers ran check_device first: throws
// std::runtime_error with make_backend's message otherwise.
std::unique_ptr<Backend> make_backend_or_throw(const BackendOptions& options);

}  // namespace weft
