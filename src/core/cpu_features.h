// Run-time CPU feature detection: SIMD kernels are chosen once per process, never assumed.
// WEFT_FORCE_SCALAR=1 in the environment selects the scalar reference kernels (for tests).
#pragma once

namespace weft {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool has_avx2_fma_f16c() const { return avx2 && fma && f16c; }
};

const CpuFeatures& cpu_features();
// True when the AVX2/FMA/F16C kernels should run (supported and not forced off).
bool use_avx2();

}  // namespace weft
