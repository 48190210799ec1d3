#include "core/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace weft {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = f.avx2;  // every AVX2 CPU shipped has F16C; checked below via cpuid where possible
#if defined(__GNUC__)
    unsigned eax, ebx, ecx, edx;
    __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0));
    f.f16c = (ecx >> 29) & 1;
#endif
#endif
    return f;
  }();
  return features;
}

bool use_avx2() {
  static const bool use = [] {
    const char* force = std::getenv("WEFT_FORCE_SCALAR");
    if (force && std::strcmp(force, "0") != 0 && force[0] != '\0') return false;
    return cpu_features().has_avx2_fma_f16c();
  }();
  return use;
}

}  // namespace weft
