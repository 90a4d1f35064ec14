// Linear layers over ggml's block formats (kernels/kquant.h): y[n, out] = x[n, in] . dequant(W)^T.
//
// W is [out, in] in one QuantType, each row quant_row_bytes(type, in) bytes, rows contiguous (a GGUF
// tensor as stored). x and y are f32.
// DECISION: for Q8_0 and IQ4_NL no quantisation of x (ggml rounds x to Q8_0 and
// sums integer products; we keep x in f32, so results differ from ggml's by x's rounding, and every
// level here computes the same bits). For the K-quants (q8k_dot_supported) x IS rounded to Q8_K, as
// ggml does, once per call, and the result is the integer dot of kernels/kquant_q8k.h (its own
// definition, reference kernels/ref/kquant_q8k.cpp; AVX-512 kernel x86/kquant_q8k_avx512.cpp, the
// AVX2 level runs the reference). The model's E4M3 rounding of activations happens before this call
// (model/weights.cpp); Q8_K is the kernel's own step after it.
//
// The sum for the f32-x types (the definition, kernels/ref/kquant_linear.cpp): each weight w_k is exactly ggml's
// dequantised value (dequantize_row_<type>); element k goes to lane k % 16 of 16 f32 accumulators,
//   acc[k % 16] = fma(w_k, x_k, acc[k % 16])   for k = 0 .. in-1 in order,
// then the lanes are added as a tree, acc[j] += acc[j + h] for h = 8, 4, 2, 1, and y = acc[0].
// This is the order of one AVX-512 register (and of two AVX2 registers), so the vector kernels equal
// the reference bit for bit, whatever the thread count.
// Threading: parallel over output rows on `pool` (may be null). Cannot fail: REQUIRES
// in % quant_block_elems(type) == 0 (shapes are validated at load). Allocation: K-quants: n * in / 256
// Q8_K blocks (292 B each) per call; the other types: none for n = 1; for
// n > 1 the AVX-512 kernel takes 4 * in floats of scratch per task (each group of four rows is decoded
// once and shared by all n tokens). Levels: AVX-512 (and AVX-512 BF16, which runs it) kernels for
// every type, AVX2 kernels for Q8_0 and IQ4_NL only; kScalar runs the reference.
// Source: ggml-quants.c dequantize_row_*; ggml-cpu/quants.c ggml_vec_dot_*_q8_K (what ggml does instead).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/kquant.h"

namespace strata::kernels {

struct QuantWeight {
  QuantType type = QuantType::kQ8_0;
  const void* w = nullptr;  // [out] rows of quant_row_bytes(type, in) bytes, 2-byte aligned
  int64_t out = 0, in = 0;
};

// Row r of W.
inline const uint8_t* quant_weight_row(const QuantWeight& w, int64_t r) {
  return static_cast<const uint8_t*>(w.w) + r * quant_row_bytes(w.type, w.in);
}

// y[n, out] = x[n, in] . dequant(W)^T at the best level for this CPU.
void linear_quant(const float* x, int64_t n, const QuantWeight& w, float* y, ThreadPool* pool);
// The same at a forced level (tests, benches). REQUIRES: kernel_level_supported(level). Levels
// without a kernel for w.type run the reference (same bits). kScalar ignores `pool`.
void linear_quant(const float* x, int64_t n, const QuantWeight& w, float* y, ThreadPool* pool, KernelLevel level);
// Whether `level` has a vector kernel for `t` (otherwise linear_quant runs the reference there).
bool linear_quant_has_kernel(QuantType t, KernelLevel level);

namespace ref {
// The definition above, serial.
void linear_quant(const float* x, int64_t n, const QuantWeight& w, float* y);
}  // namespace ref

}  // namespace strata::kernels
