#include "core/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace weft {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    // __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0), so a
    // feature reported here can be used.
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = f.avx2;  // every AVX2 CPU shipped has F16C; checked below via cpuid where possible
#if defined(__GNUC__)
    unsigned eax, ebx, ecx, edx;
    __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0));
    f.f16c = (ecx >> 29) & 1;
    const unsigned base_family = (eax >> 8) & 0xF, ext_family = (eax >> 20) & 0xFF;
    f.family = int(base_family == 0xF ? base_family + ext_family : base_family);
    unsigned v0, vb, vc, vd;
    __asm__("cpuid" : "=a"(v0), "=b"(vb), "=c"(vc), "=d"(vd) : "a"(0), "c"(0));
    char vendor[13] = {};
    std::memcpy(vendor, &vb, 4), std::memcpy(vendor + 4, &vd, 4), std::memcpy(vendor + 8, &vc, 4);
    f.amd = std::strcmp(vendor, "AuthenticAMD") == 0;
    f.intel = std::strcmp(vendor, "GenuineIntel") == 0;
#endif
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512dq = __builtin_cpu_supports("avx512dq");
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

namespace {

// Whether any kernel has an AVX-512 (F/BW/VL/DQ) or VNNI path yet: kernel_path_description must
// not claim an extension no kernel uses. Set by the change that adds the first such kernel.
constexpr bool kAvx512KernelsExist = true;  // matmul_avx512.cpp
constexpr bool kVnniKernelsExist = true;  // quant_matmul_avx512.cpp

SimdLevel best_supported() {
  const CpuFeatures& f = cpu_features();
  if (f.has_avx512_core()) return SimdLevel::kAvx512;
  if (f.has_avx2_fma_f16c()) return SimdLevel::kAvx2;
  return SimdLevel::kScalar;
}

// The cap the environment sets, or kAvx512 (no cap).
SimdLevel environment_cap() {
  const char* force = std::getenv("WEFT_FORCE_SCALAR");
  if (force && force[0] != '\0' && std::strcmp(force, "0") != 0) return SimdLevel::kScalar;
  const char* simd = std::getenv("WEFT_SIMD");
  if (simd == nullptr || simd[0] == '\0') return SimdLevel::kAvx512;
  if (std::strcmp(simd, "scalar") == 0) return SimdLevel::kScalar;
  if (std::strcmp(simd, "avx2") == 0) return SimdLevel::kAvx2;
  if (std::strcmp(simd, "avx512") != 0)  // said once: the level is chosen once per process
    std::fprintf(stderr, "weft: WEFT_SIMD=%s is not one of scalar, avx2, avx512; ignored (no cap)\n", simd);
  return SimdLevel::kAvx512;
}

}  // namespace

SimdLevel simd_level() {
  static const SimdLevel level = [] {
    const SimdLevel best = best_supported(), cap = environment_cap();
    return static_cast<int>(cap) < static_cast<int>(best) ? cap : best;
  }();
  return level;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kScalar: break;
  }
  return "scalar";
}

bool use_avx2() { return simd_level() >= SimdLevel::kAvx2; }
bool use_avx512() { return simd_level() >= SimdLevel::kAvx512; }
bool use_avx512_vnni() { return use_avx512() && cpu_features().avx512_vnni; }
bool use_avx512_bf16() { return use_avx512() && cpu_features().avx512_bf16; }

std::string kernel_path_description() {
  const CpuFeatures& f = cpu_features();
  const SimdLevel level = simd_level();
  std::string s = simd_level_name(level);
  // Extensions the kernels of this level use, and the ones the CPU has beyond them.
  std::vector<const char*> used, unused;
  auto classify = [&](bool has, bool in_use, const char* name) {
    if (has) (in_use ? used : unused).push_back(name);
  };
  classify(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq, kAvx512KernelsExist && level >= SimdLevel::kAvx512, "avx512f/bw/vl/dq");
  classify(f.avx512_vnni, kVnniKernelsExist && use_avx512_vnni(), "avx512_vnni");
  classify(f.avx512_bf16, false, "avx512_bf16");  // no kernel uses bf16 dot products (see matmul.h)
  classify(f.amx_tile, false, "amx_tile");
  auto join = [](const std::vector<const char*>& v) {
    std::string out;
    for (const char* name : v) out += std::string(out.empty() ? "" : " ") + name;
    return out;
  };
  if (!used.empty()) s += " [" + join(used) + "]";
  if (!unused.empty()) {
    s += " (cpu also has " + join(unused) + ", not used";
    if (level < best_supported()) s += std::string("; capped by WEFT_SIMD / WEFT_FORCE_SCALAR");
    s += ")";
  }
  return s;
}

}  // namespace weft
