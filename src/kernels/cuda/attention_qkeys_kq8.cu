// The key-parallel attention kernels with a q8_0 K, for every V type and launch configuration
// (attention_qkeys_kernel.cuh); one translation unit per K type so they compile in parallel.
#include "kernels/cuda/attention_qkeys_kernel.cuh"

namespace weft::cuda::detail::qkeys {

template <>
KernelFn kernel_for_k<kKvQ8>(const Config& cfg) {
  if (cfg.vt == kKvF16) return kernel_types<kKvQ8, kKvF16>(cfg);
  if (cfg.vt == kKvQ8) return kernel_types<kKvQ8, kKvQ8>(cfg);
  if (cfg.vt == kKvQ4) return kernel_types<kKvQ8, kKvQ4>(cfg);
  return nullptr;
}

}  // namespace weft::cuda::detail::qkeys
