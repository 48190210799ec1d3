// Run-time CPU feature detection: SIMD kernels are chosen once per process, never assumed.
// WEFT_FORCE_SCALAR=1 in the environment selects the scalar reference kernels (for tests).
#pragma once

#include <string>

namespace weft {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false, avx512bw = false, avx512_vnni = false, avx512_bf16 = false, amx_tile = false;
  bool has_avx2_fma_f16c() const { return avx2 && fma && f16c; }
};

const CpuFeatures& cpu_features();
// True when the AVX2/FMA/F16C kernels should run (supported and not forced off).
bool use_avx2();
// The kernel path this process runs ("avx2" or "scalar") and, after it, what the CPU offers
// beyond it that weft does not use yet (e.g. "avx2 (cpu also has avx512f avx512_vnni)"); printed
// by `weft info` and recorded in bench output.
std::string kernel_path_description();

}  // namespace weft
