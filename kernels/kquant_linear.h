// Linear layers over ggml's block formats (kernels/kquant.h): y[n, out] = x[n, in] . dequant(W)^T.
//
// W is [out, in] in one QuantType, each row quant_row_bytes(type, in) bytes, rows contiguous (a GGUF
// tensor as stored). x and y are f32.
// DECISION: x is rounded before the dot, as ggml does, once per call: to Q8_K for the K-quants
// (q8k_dot_supported: Q4_K, Q2_K, Q6_K, Q3_K; the bytes of ggml's quantize_row_q8_K_ref) and to Q8_0
// for Q8_0 and IQ4_NL (q8_0_dot_supported; the bytes of quantize_row_q8_0_ref). The result is then
// the integer dot of kernels/kquant_q8k.h or kernels/kquant_q8_0_dot.h: each defined there
// operation by operation, references in kernels/ref/kquant_q8k.cpp and kquant_q8_0_dot.cpp, AVX-512
// kernels in x86/kquant_q8k_avx512.cpp and x86/kquant_q8_0_dot_avx512.cpp, AVX2 kernels in
// x86/kquant_q8k_avx2.cpp and x86/kquant_q8_0_dot_avx2.cpp, all bit-identical to the references.
// The model's E4M3 rounding of activations happens before this call (model/weights.cpp); Q8_K / Q8_0
// is the kernel's own step. (An earlier f32-x definition, a 16-lane FMA sum of ggml's dequantised
// weights, and its kernels were removed once every type had integer kernels at every level.)
// Threading: parallel over output rows on `pool` (may be null); for n > 1 each task walks its rows in
// chunks of 16 and runs every token on a chunk while its weights are in cache (the AVX-512 Q8_0-x kernel
// decodes each weight tile once per four tokens). Cannot fail: REQUIRES
// in % quant_block_elems(type) == 0 (shapes are validated at load). Allocation: n * in / 256 Q8_K
// blocks (292 B each) or n * in / 32 Q8_0 blocks (34 B each) per call. Levels: AVX2 and AVX-512 (and
// AVX-512 BF16, which runs the AVX-512 one) kernels for every type; kScalar runs the references.
// Source: ggml-quants.c quantize_row_q8_K_ref, quantize_row_q8_0_ref; ggml-cpu/quants.c
// ggml_vec_dot_*_q8_K, ggml_vec_dot_{q8_0,iq4_nl}_q8_0.
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
// without a kernel for w.type run the reference (same bits; today only kScalar and non-x86 builds).
// kScalar ignores `pool`.
void linear_quant(const float* x, int64_t n, const QuantWeight& w, float* y, ThreadPool* pool, KernelLevel level);
// Whether `level` has a vector kernel for `t` (otherwise linear_quant runs the reference there).
bool linear_quant_has_kernel(QuantType t, KernelLevel level);

namespace ref {
// The definition above, serial.
void linear_quant(const float* x, int64_t n, const QuantWeight& w, float* y);
}  // namespace ref

}  // namespace strata::kernels
