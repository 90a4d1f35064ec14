// Small row operations the blocks share (scalar f32, the reference definitions).
// TODO(#7): SIMD versions move to kernels/ with tests against these.
#pragma once

#include <cmath>
#include <cstdint>

#include "model/torch_sum.h"

namespace strata::model {

// out[i] = w[i] * (x[i] * rsqrt(mean(x^2) + eps)); out may alias x.
// Source: model.py RMSNorm.forward (x * rsqrt first, then the weight).
// ROUNDING: the mean of squares is summed in the reference's order (model/torch_sum.h).
inline void rms_norm(const float* x, int64_t n, const float* w, double eps, float* out) {
  const float r = 1.0f / std::sqrt(torch_mean_square(x, n) + static_cast<float>(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * r);
}

// 1 / sqrt(mean(x^2) + eps)
inline float rms_rsqrt(const float* x, int64_t n, double eps) {
  return 1.0f / std::sqrt(torch_mean_square(x, n) + static_cast<float>(eps));
}

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1 and threshold 20.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace strata::model
