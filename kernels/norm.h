// RMSNorm with PyTorch's CPU reduction order for the mean of squares.
//
// mean_square(x) = mean(x^2) with the squares rounded to f32 and summed in the order of ATen's
// cascade sum over a contiguous row with 8 float lanes (model/torch_sum.h explains why the order is
// part of the model: RMSNorm feeds FP8 activation quantisation). The vector paths reproduce that
// order lane for lane, so every level equals kernels::ref bit for bit (and model::torch_mean_square).
// rms_norm: out = w * (x * (1 / sqrt(mean_square(x) + eps))), rounded as written in f32.
// Source: model.py RMSNorm.forward. Threading: rms_norm splits rows over `pool` (may be null).
// Cannot fail.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/dispatch.h"

namespace strata::kernels {

// mean(x[0..n)^2) in the reference's order (n >= 1).
float mean_square(const float* x, int64_t n);
float mean_square(const float* x, int64_t n, KernelLevel level);
// 1 / sqrt(mean_square(x) + eps)
float rms_rsqrt(const float* x, int64_t n, float eps);

// out[r, i] = w[i] * (x[r, i] * rms_rsqrt(x[r], dim, eps)) for r < n_rows; out may alias x.
// Rows are `dim` apart. w may be null (no weight: out = x * rsqrt).
void rms_norm(const float* x, int64_t n_rows, int64_t dim, const float* w, float eps, float* out, ThreadPool* pool);
void rms_norm(const float* x, int64_t n_rows, int64_t dim, const float* w, float eps, float* out, ThreadPool* pool,
              KernelLevel level);

namespace ref {
float mean_square(const float* x, int64_t n);
void rms_norm(const float* x, int64_t n_rows, int64_t dim, const float* w, float eps, float* out);
}  // namespace ref

}  // namespace strata::kernels
