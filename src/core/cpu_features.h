// Run-time CPU feature detection: SIMD kernels are chosen once per process, never assumed.
//
// Three kernel levels, each a superset of the one before: scalar (the reference twins, always
// compiled), avx2 (AVX2 + FMA + F16C) and avx512 (AVX-512 F/BW/VL/DQ, plus VNNI and BF16 where
// the CPU has them). A level is used only where the CPU and the OS support it; the environment
// can cap it, never raise it:
//   WEFT_SIMD=scalar|avx2|avx512   highest level to use (default: the best the CPU has; any other
//                                  value is named on stderr and ignored)
//   WEFT_FORCE_SCALAR=1            same as WEFT_SIMD=scalar (kept for the tests that use it)
// Which level ran is printed by `weft info` and recorded in bench output.
#pragma once

#include <string>

namespace weft {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, amx_tile = false;
  // Vendor and display family (base + extended), for the few tunings that differ by
  // microarchitecture (never for what a kernel computes).
  bool amd = false, intel = false;
  int family = 0;
  bool has_avx2_fma_f16c() const { return avx2 && fma && f16c; }
  bool has_avx512_core() const { return has_avx2_fma_f16c() && avx512f && avx512bw && avx512vl && avx512dq; }
};

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const CpuFeatures& cpu_features();
// The level the kernels run at: the best the CPU has, capped by WEFT_SIMD / WEFT_FORCE_SCALAR.
SimdLevel simd_level();
const char* simd_level_name(SimdLevel level);
// True when the AVX2/FMA/F16C kernels should run (supported and not capped below).
bool use_avx2();
// True when the AVX-512 F/BW/VL/DQ kernels should run.
bool use_avx512();
// AVX-512 kernels that also need VNNI (int8 dot products) or BF16 (bf16 dot products).
bool use_avx512_vnni();
bool use_avx512_bf16();
// The kernel level this process runs ("avx512", "avx2" or "scalar"), which extensions its
// kernels use, and what the CPU offers beyond that which weft does not use (e.g.
// "avx2 (cpu also has avx512f avx512_vnni, not used: capped by WEFT_SIMD)"); printed by
// `weft info` and recorded in bench output.
std::string kernel_path_description();

}  // namespace weft
