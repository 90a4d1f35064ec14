// What SIMD the running CPU supports, read once at startup (CPUID via the compiler builtins).
#pragma once

#include <string>

namespace strata {

struct CpuFeatures {
  bool avx2 = false;       // AVX2 + FMA + F16C
  bool avx512 = false;     // AVX-512 F/BW/VL/DQ
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool avx512_vbmi = false;
  bool amx_bf16 = false;   // AMX-TILE + AMX-BF16 (CPUID 7.0 EDX bits 24, 22); the OS must still grant the tile state

  // Reads the running CPU.
  static CpuFeatures detect();
  // "avx512+bf16+vnni", "avx2", "scalar"
  std::string best_level() const;
};

}  // namespace strata
