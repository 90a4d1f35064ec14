// Decode matvec over ggml block formats for the x86 levels (kernels/kquant_linear.h): bit-exact with
// kernels::ref::linear_quant. Internal to kernels/. Call only on a CPU with the ISA.
#pragma once

#include <cstdint>

namespace strata::kernels::x86 {

// The integer dots for rows [r0, r1) of n tokens: y[t * out + r] = ref::dot_q8k(row r, xq of token t)
// (Q8_K, kernels/kquant_q8k.h) or ref::dot_q8_0 (Q8_0 x, kernels/kquant_q8_0_dot.h).
//   type  a kernels::QuantType value (static_cast<int>)
//   xq    [n][nb] kernels::BlockQ8_K / BlockQ8_0 (x quantised once per call)
//   w     row 0 of W; row r at w + r * row_bytes (2-byte aligned)
//   y     [n][out] f32, only rows [r0, r1) of each token written.
// The Q8_0-x kernel decodes each tile of weights once for up to four tokens; the Q8_K one runs the
// tokens one after another. Returns false (and writes nothing) for a type without that path
// (q8k_dot_supported, q8_0_dot_supported).
bool linear_q8k_rows_avx512(int type, const void* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes,
                            int64_t r0, int64_t r1, float* y, int64_t out);
bool linear_q8_0_rows_avx512(int type, const void* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes,
                             int64_t r0, int64_t r1, float* y, int64_t out);
// The same with AVX2 + F16C (x86/kquant_q8k_avx2.cpp, x86/kquant_q8_0_dot_avx2.cpp), for CPUs without
// AVX-512; same bits. Both run the tokens one after another.
bool linear_q8k_rows_avx2(int type, const void* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes,
                          int64_t r0, int64_t r1, float* y, int64_t out);
bool linear_q8_0_rows_avx2(int type, const void* xq, int64_t n, int64_t nb, const uint8_t* w, int64_t row_bytes,
                           int64_t r0, int64_t r1, float* y, int64_t out);

}  // namespace strata::kernels::x86
