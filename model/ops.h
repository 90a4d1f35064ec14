// Small row operations the blocks share. The math lives in kernels/ (vectorised, every level bit
// for bit equal to its scalar reference there): RMSNorm in kernels/norm.h (PyTorch's reduction
// order, model/torch_sum.h), exp/sigmoid/SiLU in kernels/activation.h (glibc's expf restated).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/activation.h"
#include "kernels/norm.h"
#include "model/torch_sum.h"  // torch_inner_sum for the blocks that reduce in PyTorch's order

namespace strata::model {

// out[i] = w[i] * (x[i] * rsqrt(mean(x^2) + eps)); out may alias x.
// Source: model.py RMSNorm.forward (x * rsqrt first, then the weight).
// ROUNDING: the mean of squares is summed in the reference's order (model/torch_sum.h).
inline void rms_norm(const float* x, int64_t n, const float* w, double eps, float* out) {
  kernels::rms_norm(x, 1, n, w, static_cast<float>(eps), out, nullptr);
}

// 1 / sqrt(mean(x^2) + eps)
inline float rms_rsqrt(const float* x, int64_t n, double eps) {
  return kernels::rms_rsqrt(x, n, static_cast<float>(eps));
}

inline float sigmoid(float x) { return kernels::sigmoid_f32(x); }
inline float silu(float x) { return kernels::silu_f32(x); }
// torch.nn.functional.softplus with beta 1 and threshold 20.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace strata::model
