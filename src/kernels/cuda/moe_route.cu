#include "kernels/cuda/moe_route.cuh"

#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_route_dev.cuh"

namespace weft::cuda {
namespace {

constexpr int kGroupThreads = 256;

// One block per row.
__global__ void __launch_bounds__(kTopkThreads)
    moe_topk_kernel(float* logits, int E, int K, bool renormalize, int32_t* slot_expert, float* slot_weight) {
  pdl_begin_early();
  extern __shared__ float shared[];
  topk_row(shared, blockIdx.x, logits, E, K, renormalize, slot_expert, slot_weight);
}

__global__ void __launch_bounds__(kGroupThreads)
    moe_group_kernel(const int32_t* slot_expert, int S, int E, int32_t* expert_begin, int32_t* sorted_slot,
                     int32_t* slot_pos, int32_t* tile_expert, int32_t* tile_t0, int32_t* n_tiles,
                     long long* experts_touched) {
  pdl_begin_early();
  extern __shared__ int32_t ints[];
  group_slots(ints, slot_expert, S, E, expert_begin, sorted_slot, slot_pos, tile_expert, tile_t0, n_tiles,
              experts_touched);
}

// One row (decode): both steps in one block, one launch instead of two.
__global__ void __launch_bounds__(kTopkThreads)
    moe_route_one_kernel(float* logits, int E, int K, bool renormalize, MoeRouteOut out) {
  pdl_begin_early();
  extern __shared__ float shared[];
  route_one_row(shared, logits, E, K, renormalize, out);
}

}  // namespace

void moe_route(float* logits, int64_t rows, int64_t n_experts, int64_t k, bool renormalize, const MoeRouteOut& out,
               cudaStream_t stream) {
  if (k > kMaxK || k > n_experts) check(cudaErrorInvalidValue, "moe_route: top-k larger than 64 or than the experts");
  if (rows == 0) return;
  const int E = int(n_experts), K = int(k), S = int(rows * k);
  static_assert(kTopkThreads == kGroupThreads, "the one-row kernel runs both steps with one block");
  if (rows == 1) {
    launch_pdl(moe_route_one_kernel, 1, kTopkThreads, size_t(3 * E) * sizeof(float), stream, logits, E, K, renormalize, out);
    WEFT_CUDA_LAUNCHED();
    return;
  }
  launch_pdl(moe_topk_kernel, unsigned(rows), kTopkThreads, size_t(2 * E) * sizeof(float), stream, logits, E, K, renormalize,
                                                                                          out.slot_expert, out.slot_weight);
  WEFT_CUDA_LAUNCHED();
  launch_pdl(moe_group_kernel, 1, kGroupThreads, size_t(3 * E) * sizeof(int32_t), stream, out.slot_expert, S, E, out.expert_begin, out.sorted_slot, out.slot_pos, out.tile_expert, out.tile_t0, out.n_tiles,
      out.experts_touched);
  WEFT_CUDA_LAUNCHED();
}

}  // namespace weft::cuda
