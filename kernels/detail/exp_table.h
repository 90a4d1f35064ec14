// Internal to kernels/: the constants of kernels::exp_f32 (kernels/activation.h), shared by the
// scalar definition (kernels/ref/activation.cpp) and the vector versions (kernels/x86/simd.h).
//
// The algorithm is the one of glibc's expf (ARM optimized-routines, glibc >= 2.27; its FMA variant,
// which glibc selects on any CPU with FMA): x * 32/ln2 = k + r, exp(x) = 2^(k/32) * p(r) in double,
// rounded once to f32. The table holds, for i in [0, 32), the bits of the double nearest to
// 2^(i/32) minus i << 47, so that adding k << 47 to entry k % 32 builds 2^(k/32) directly
// (tests/kernels/activation_test.cpp checks every entry against exp2l and the whole function
// against the C library over every f32 input).
#pragma once

#include <cstdint>

namespace strata::kernels::detail {

alignas(64) inline constexpr uint64_t kExpTable[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};
inline constexpr double kExpInvLn2N = 0x1.71547652b82fep+0 * 32;  // 32 / ln 2
inline constexpr double kExpShift = 0x1.8p+52;                    // rounds to an integer when added
// The cubic of 2^(r/32) - 1 ~ C2 r + C1 r^2 + C0 r^3.
inline constexpr double kExpC0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32;
inline constexpr double kExpC1 = 0x1.ebfce50fac4f3p-3 / 32 / 32;
inline constexpr double kExpC2 = 0x1.62e42ff0c52d6p-1 / 32;
// Out-of-range inputs, as glibc returns them: overflow to +inf above log(2^128); 0 below
// log(2^-150); 2^-149 between that and log(2^-149) (its "may underflow" value 0x1.4p-75f^2).
inline constexpr float kExpOverflowAbove = 0x1.62e42ep6f;
inline constexpr float kExpUnderflowBelow = -0x1.9fe368p6f;
inline constexpr float kExpMayUnderflowBelow = -0x1.9d1d9ep6f;
inline constexpr float kExpMayUnderflowValue = 0x1p-149f;

}  // namespace strata::kernels::detail
