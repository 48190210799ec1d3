#include "backend/backend_factory.h"

#include <stdexcept>

#include "backend/cpu_backend.h"
#ifdef WEFT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_weight_memory.h"
#endif

namespace weft {

Result<Device> parse_device(const std::string& name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return Status::error("unknown device '" + name + "' (expected cpu or cuda)");
}

const char* device_name(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

Status check_device(Device device) {
  if (device == Device::kCpu) return Status();
#ifdef WEFT_HAVE_CUDA
  return cuda_device_status();
#else
  return Status::error("--device cuda: this build of weft has no CUDA backend (configure where nvcc is found, "
                       "with -DWEFT_CUDA=ON)");
#endif
}

Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options) {
  WEFT_RETURN_IF_ERROR(check_device(options.device));
#ifdef WEFT_HAVE_CUDA
  if (options.device == Device::kCuda) return make_cuda_backend(options.threads);
#endif
  return std::unique_ptr<Backend>(new CpuBackend(options.threads));
}

Result<std::unique_ptr<WeightMemory>> make_weight_memory(const BackendOptions& options) {
  WEFT_RETURN_IF_ERROR(check_device(options.device));
#ifdef WEFT_HAVE_CUDA
  if (options.device == Device::kCuda) return make_cuda_weight_memory();
#endif
  return host_weight_memory(options.threads);
}

std::unique_ptr<Backend> make_backend_or_throw(const BackendOptions& options) {
  auto b = make_backend(options);
  if (!b.ok()) throw std::runtime_error(b.status().message());
  return std::move(b.value());
}

}  // namespace weft
