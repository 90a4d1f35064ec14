// The integer decode matvec over the 32-wide block types (Q8_0, IQ4_NL), as ggml computes it: x is
// first rounded to Q8_0 (per 32 values an fp16 scale and int8 quants: the bytes of ggml's
// quantize_row_q8_0_ref, kernels::quantize_row_q8_0_ref), then each block's weight-times-x products
// are summed exactly in int32 and scaled by the two fp16 block scales. Used by kernels::linear_quant
// for the types where q8_0_dot_supported(t) (kquant_linear.h); the K-quants take Q8_K instead
// (kernels/kquant_q8k.h).
//
// The definition (kernels/ref/kquant_q8_0_dot.cpp), for one weight row W and one quantised x, block b:
//   S_b = sum_{k < 32} q_k * xq_k              (int32, exact: |S_b| <= 32 * 128 * 127 < 2^19)
//   dd = d_b * xd_b,  t = dd * float(S_b),  acc = acc + t       for b = 0 .. nb-1 in order, acc = 0
// with d_b, xd_b the weight's and x's fp16 block scales as f32, q_k the weight's int8 quants (Q8_0) or
// kIq4nlValues[index] (IQ4_NL), each operation one f32 rounding (no fused multiply-add; dd and
// float(S_b) are exact), y = acc. This is ggml_vec_dot_q8_0_q8_0_generic and
// ggml_vec_dot_iq4_nl_q8_0_generic operation for operation; ggml's SIMD versions keep 8 f32 lanes of
// partial sums per row instead, so they differ from it (and from us) in the last bits.
// Source: ggml-quants.c quantize_row_q8_0_ref; ggml-cpu/quants.c ggml_vec_dot_{q8_0,iq4_nl}_q8_0_generic.
#pragma once

#include <cstdint>

#include "kernels/kquant.h"

namespace strata::kernels {

// Whether linear_quant takes the Q8_0-x integer path for t (Q8_0, IQ4_NL).
inline bool q8_0_dot_supported(QuantType t) { return t == QuantType::kQ8_0 || t == QuantType::kIq4Nl; }

namespace ref {
// The definition above for one row: w = nb blocks of type t (q8_0_dot_supported), x = nb Q8_0 blocks.
float dot_q8_0(QuantType t, const uint8_t* w, const BlockQ8_0* x, int64_t nb);
}  // namespace ref

}  // namespace strata::kernels
