#include "kernels/cuda/common.cuh"

#include <stdexcept>
#include <string>

namespace weft::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace weft::cuda
