#include "core/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace strata {

CpuFeatures CpuFeatures::detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
  f.avx512_vbmi = f.avx512 && __builtin_cpu_supports("avx512vbmi");
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) != 0) f.amx_bf16 = f.avx512 && (d >> 24 & 1u) != 0 && (d >> 22 & 1u) != 0;
#endif
  return f;
}

std::string CpuFeatures::best_level() const {
  if (avx512) {
    std::string s = "avx512";
    if (avx512_bf16) s += "+bf16";
    if (avx512_vnni) s += "+vnni";
    if (amx_bf16) s += "+amx";
    return s;
  }
  if (avx2) return "avx2";
  return "scalar";
}

}  // namespace strata
