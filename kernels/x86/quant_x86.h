// Vector activation quantisers (blocks of 32, in place) of the x86 levels; bit-exact with their
// kernels::ref definitions. Internal to kernels/. Call only on a CPU with the ISA.
#pragma once

#include <cstdint>

namespace strata::kernels::x86 {

// n is a multiple of 32.
void act_quant_fp8_avx2(float* x, int64_t n);
void act_quant_fp8_avx512(float* x, int64_t n);

// fp4_quant_e8m0_inplace (blocks of 32, in place) with AVX2 / AVX-512; bit-exact with
// kernels::ref::fp4_quant_e8m0_inplace. n is a multiple of 32.
void fp4_quant_e8m0_avx2(float* x, int64_t n);
void fp4_quant_e8m0_avx512(float* x, int64_t n);

}  // namespace strata::kernels::x86
