// The integer decode matvec over K-quant weights (Q4_K, Q2_K, Q6_K, Q3_K), as ggml computes it: x is first
// rounded to Q8_K (per 256 values an f32 scale, int8 quants, int16 sums per 16), then each
// super-block's weight-times-x products are summed exactly in int32 and combined with the f32 block
// scales. Used by kernels::linear_quant for the types where q8k_dot_supported(t) (kquant_linear.h).
//
// The definition (kernels/ref/kquant_q8k.cpp), for one weight row W and one quantised x, block b:
//   S_b = sum_j sc_j * sum_{k in sub-block j} q_k * xq_k        (int32, exact)
//   M_b = sum_j m_j * (sum of xq over sub-block j)              (int32, exact; from bsums)
//   dd = d_b * xd_b,  dm = dmin_b * xd_b,  t = dd * float(S_b),  u = dm * float(M_b)
//   acc = acc + (t - u)                                           for b = 0 .. nb-1 in order, acc = 0
// with d_b, dmin_b the block's fp16 scales as f32, xd_b the Q8_K block's f32 scale, each operation one
// f32 rounding (no fused multiply-add; float(S) rounds to nearest when |S| > 2^24), y = acc.
// Sub-blocks: Q4_K 8 of 32 with 6-bit sc/m; Q2_K 16 of 16 with 4-bit sc/m (kernels/kquant.h).
// Types without mins (Q6_K: signed q in [-32, 31], int8 sc per 16; Q3_K: q in [-4, 3], sc - 32 in
// [-32, 31] per 16) have no M, u and dmin: dd = d_b * xd_b, t = dd * float(S_b), acc = acc + t.
// The integer sums cannot overflow: |S| <= 256 * 63 * 15 * 127 < 2^25, |M| <= 256 * 63 * 127; Q6_K
// |S| <= 256 * 32 * 128 * 127 < 2^28.
// Differences from ggml's result: only the f32 order (ggml keeps 8 or 16 f32 lanes of partial sums
// per row); x's rounding is the same as ggml's quantize_row_q8_K_ref, bit for bit.
// Source: ggml-quants.c quantize_row_q8_K_ref; ggml-cpu/quants.c ggml_vec_dot_{q4,q2,q6,q3}_K_q8_K_generic.
#pragma once

#include <cstdint>

#include "kernels/kquant.h"

namespace strata::kernels {

// One Q8_K block (ggml block_q8_K): x[256] ~ d * qs, bsums[i] = sum of qs[16 i .. 16 i + 15].
struct BlockQ8_K {
  float d;            // f32 scale: amax / 127 (0 for an all-zero block)
  int8_t qs[256];     // round-to-nearest-even(x * (-127 / max)), in [-127, 127]
  int16_t bsums[16];  // sums of 16 quants
};
static_assert(sizeof(BlockQ8_K) == 292);

// Whether linear_quant takes the Q8_K integer path for t (the K-quants: Q4_K, Q2_K, Q6_K, Q3_K).
inline bool q8k_dot_supported(QuantType t) {
  return t == QuantType::kQ4_K || t == QuantType::kQ2_K || t == QuantType::kQ6_K || t == QuantType::kQ3_K;
}

// x[k] (finite) -> y[k / 256]: the bytes ggml quantize_row_q8_K_ref writes. REQUIRES k % 256 == 0.
// Shared by every level (it runs once per token per call, not per row).
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t k);

namespace ref {
// The definition above for one row: w = nb blocks of type t (q8k_dot_supported), x = nb Q8_K blocks.
float dot_q8k(QuantType t, const uint8_t* w, const BlockQ8_K* x, int64_t nb);
}  // namespace ref

}  // namespace strata::kernels
