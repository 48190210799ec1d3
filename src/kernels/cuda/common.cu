#include "kernels/cuda/common.cuh"

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace weft::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

namespace {
bool pdl_from_env() {
  const char* e = std::getenv("WEFT_CUDA_PDL");
  return !(e && std::string(e) == "0");
}
std::atomic<bool> pdl_on{pdl_from_env()};
}  // namespace

bool pdl_enabled() { return pdl_on.load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { pdl_on.store(on, std::memory_order_relaxed); }
bool pdl_enabled_by_env() { return pdl_from_env(); }

}  // namespace weft::cuda
