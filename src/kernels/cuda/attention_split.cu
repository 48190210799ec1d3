// The tiled split kernel (work in progress: not enabled yet, every call takes the simple kernel).
#include "kernels/cuda/attention_kernels.cuh"

namespace weft::cuda::detail {

bool split_supports(const AttentionCall&) { return false; }
size_t split_workspace_bytes(const AttentionCall&) { return 0; }
void attention_split(const AttentionCall*, const size_t*, int64_t, uint8_t*, cudaStream_t) {}

}  // namespace weft::cuda::detail
