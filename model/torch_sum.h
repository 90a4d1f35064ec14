// The summation orders of the reference's CPU reductions, reproduced exactly.
//
// The fixtures were computed by PyTorch on CPU. Where a sum feeds an FP8/FP4 rounding point (the
// mean of squares in every RMSNorm before an FP8 linear, Engram's gate), a one-ulp difference can
// flip an E4M3 rounding and, in a quantised model, change everything downstream (seen: layer 2 of
// the v41-tiny fixture, query 25, an element at 7.6e-8 relative from an E4M3 midpoint). So strata
// adds in the reference's order: ATen's cascade sum (aten/src/ATen/native/cpu/SumKernel.cpp:
// vectorized_inner_sum / row_sum with ilp 4 / multi_row_sum with 4 levels) with 8 float lanes, as
// its AVX2 kernels run (the fixtures match the 8-lane order, not 16).
// ROUNDING: these are the reference's reduction orders; do not "simplify" them.
#pragma once

#include <cstdint>

namespace strata::model {

// sum(x[0..n)) in the order of torch.sum over a contiguous last dimension (f32, AVX2 lanes).
float torch_inner_sum(const float* x, int64_t n);

// sum(x[0..n)) in the order torch.sum uses along a strided (outer) dimension: multi_row_sum's
// cascade over the n values, each output lane independent.
float torch_outer_sum(const float* x, int64_t n, int64_t stride = 1);

// mean(x^2) as x.square().mean(-1): squares rounded to f32, torch_inner_sum, divided by n.
float torch_mean_square(const float* x, int64_t n);

}  // namespace strata::model
