// Vector act_quant_fp8 (blocks of 32, in place) of the x86 levels; bit-exact with
// kernels::ref::act_quant_fp8_inplace. Internal to kernels/. Call only on a CPU with the ISA.
#pragma once

#include <cstdint>

namespace strata::kernels::x86 {

// n is a multiple of 32.
void act_quant_fp8_avx2(float* x, int64_t n);
void act_quant_fp8_avx512(float* x, int64_t n);

}  // namespace strata::kernels::x86
