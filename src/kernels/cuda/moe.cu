#include "kernels/cuda/moe.cuh"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace weft::cuda {
namespace {

__global__ void moe_gather_kernel(const int32_t* sorted_slot, int64_t k, const float* x, int64_t width, float* dst) {
  pdl_begin_early();
  const int64_t i = blockIdx.x;
  const float* src = x + (sorted_slot[i] / k) * width;
  for (int64_t h = threadIdx.x; h < width; h += blockDim.x) dst[i * width + h] = src[h];
}

constexpr int kMaxK = 64;

__global__ void moe_combine_kernel(const int32_t* slot_expert, const float* slot_weight, const int32_t* slot_pos,
                                   int64_t k, const float* out, int64_t width, float* y) {
  pdl_begin_early();
  const int64_t t = blockIdx.x;
  __shared__ int32_t order[kMaxK];  // every block of the row sorts its k slots (k is small)
  if (threadIdx.x == 0) {
    // Insertion sort of the row's slots by expert id (stable: equal ids keep slot order).
    for (int64_t j = 0; j < k; ++j) {
      const int32_t s = int32_t(t * k + j);
      int64_t p = j;
      while (p > 0 && slot_expert[order[p - 1]] > slot_expert[s]) {
        order[p] = order[p - 1];
        --p;
      }
      order[p] = s;
    }
  }
  __syncthreads();
  for (int64_t h = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; h < width; h += int64_t(gridDim.y) * blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      acc = combine_step_dev(acc, slot_weight[order[j]], out[int64_t(slot_pos[order[j]]) * width + h]);
    y[t * width + h] = acc;
  }
}

}  // namespace

void moe_gather(const int32_t* sorted_slot, int64_t n_slots, int64_t k, const float* x, int64_t width, float* dst,
                cudaStream_t stream) {
  if (n_slots == 0) return;
  launch_pdl(moe_gather_kernel, unsigned(n_slots), 256, 0, stream, sorted_slot, k, x, width, dst);
  WEFT_CUDA_LAUNCHED();
}

void moe_combine(const int32_t* slot_expert, const float* slot_weight, const int32_t* slot_pos, int64_t rows,
                 int64_t k, const float* out, int64_t width, float* y, cudaStream_t stream) {
  if (rows == 0) return;
  if (k > kMaxK) check(cudaErrorInvalidValue, "moe_combine: more than 64 experts per token");
  // Columns spread over blocks as well (a decode row is one row: one block would leave the read of
  // its k expert outputs to one SM); each element's sum is the same whatever the grid.
  const dim3 grid(unsigned(rows), std::min(blocks_for(width, 256), 16u));
  launch_pdl(moe_combine_kernel, grid, 256, 0, stream, slot_expert, slot_weight, slot_pos, k, out, width, y);
  WEFT_CUDA_LAUNCHED();
}

}  // namespace weft::cuda
