#include "core/cpu_features.h"

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
#endif
  return f;
}

std::string CpuFeatures::best_level() const {
  if (avx512) {
    std::string s = "avx512";
    if (avx512_bf16) s += "+bf16";
    if (avx512_vnni) s += "+vnni";
    return s;
  }
  if (avx2) return "avx2";
  return "scalar";
}

}  // namespace strata
