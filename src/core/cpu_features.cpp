#include "core/cpu_features.h"

#include <cstdlib>
#include <cstring>
#include <utility>

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
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
    f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
#if defined(__GNUC__)
    unsigned a7, b7, c7, d7;
    __asm__("cpuid" : "=a"(a7), "=b"(b7), "=c"(c7), "=d"(d7) : "a"(7), "c"(0));
    f.amx_tile = (d7 >> 24) & 1;
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

std::string kernel_path_description() {
  const CpuFeatures& f = cpu_features();
  std::string s = use_avx2() ? "avx2" : "scalar";
  std::string extra;
  for (auto [has, name] : {std::pair{f.avx512f, "avx512f"}, {f.avx512bw, "avx512bw"}, {f.avx512_vnni, "avx512_vnni"},
                           {f.avx512_bf16, "avx512_bf16"}, {f.amx_tile, "amx_tile"}})
    if (has) extra += std::string(extra.empty() ? "" : " ") + name;
  if (!extra.empty()) s += " (cpu also has " + extra + ", not used yet)";
  return s;
}

}  // namespace weft
