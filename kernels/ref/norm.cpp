// Scalar definitions of kernels/norm.h and kernels/rope.h.
//
// mean_square restates ATen's cascade sum (aten/src/ATen/native/cpu/SumKernel.cpp: row_sum with
// ilp 4 over 8-float vectors, multi_row_sum with 4 levels) lane by lane, as model/torch_sum.cpp
// does; tests/kernels/norm_test.cpp checks the two agree bit for bit.
#include <algorithm>
#include <cmath>

#include "kernels/norm.h"
#include "kernels/rope.h"

namespace strata::kernels {
namespace {

constexpr int kLanes = 8;   // Vectorized<float>::size() under AVX2
constexpr int kIlp = 4;     // row_sum's ilp factor
constexpr int kLevels = 4;  // multi_row_sum's levels

int64_t ceil_log2(int64_t v) {
  int64_t r = 0;
  while ((int64_t{1} << r) < v) ++r;
  return r;
}

// Sum of squares of x[0..n) in the cascade order, for n >= 8 (the vectorised branch).
float cascade_sum_squares(const float* x, int64_t n) {
  const int64_t vec = n / kLanes, rows = vec / kIlp;
  // multi_row_sum over `rows` steps of kIlp accumulators of kLanes lanes.
  const int64_t power = std::max<int64_t>(4, ceil_log2(rows) / kLevels);
  const int64_t step = int64_t{1} << power, mask = step - 1;
  float acc[kLevels][kIlp][kLanes] = {};
  auto sq = [&](int64_t v, int l) { return x[v * kLanes + l] * x[v * kLanes + l]; };
  int64_t i = 0;
  while (i + step <= rows) {
    for (int64_t j = 0; j < step; ++j, ++i)
      for (int k = 0; k < kIlp; ++k)
        for (int l = 0; l < kLanes; ++l) acc[0][k][l] += sq(i * kIlp + k, l);
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < kIlp; ++k)
        for (int l = 0; l < kLanes; ++l) {
          acc[j][k][l] += acc[j - 1][k][l];
          acc[j - 1][k][l] = 0.0f;
        }
      if ((i & (mask << (j * power))) != 0) break;
    }
  }
  for (; i < rows; ++i)
    for (int k = 0; k < kIlp; ++k)
      for (int l = 0; l < kLanes; ++l) acc[0][k][l] += sq(i * kIlp + k, l);
  for (int j = 1; j < kLevels; ++j)
    for (int k = 0; k < kIlp; ++k)
      for (int l = 0; l < kLanes; ++l) acc[0][k][l] += acc[j][k][l];
  // row_sum: vectors past rows * kIlp go into accumulator 0, then the kIlp partials fold left to right.
  for (int64_t v = rows * kIlp; v < vec; ++v)
    for (int l = 0; l < kLanes; ++l) acc[0][0][l] += sq(v, l);
  for (int k = 1; k < kIlp; ++k)
    for (int l = 0; l < kLanes; ++l) acc[0][0][l] += acc[0][k][l];
  // vectorized_inner_sum: the scalar tail first, then the lanes in order.
  float total = 0.0f;
  for (int64_t k = vec * kLanes; k < n; ++k) total += x[k] * x[k];
  for (int l = 0; l < kLanes; ++l) total += acc[0][0][l];
  return total;
}

// n < 8: scalar_inner_sum, i.e. row_sum over single values (no cascade level is ever completed
// below 16 rows), then added to 0.
float short_sum_squares(const float* x, int64_t n) {
  const int64_t rows = n / kIlp;
  float acc[kIlp] = {};
  for (int64_t i = 0; i < rows; ++i)
    for (int k = 0; k < kIlp; ++k) acc[k] += x[i * kIlp + k] * x[i * kIlp + k];
  for (int64_t i = rows * kIlp; i < n; ++i) acc[0] += x[i] * x[i];
  for (int k = 1; k < kIlp; ++k) acc[0] += acc[k];
  return 0.0f + acc[0];
}

}  // namespace

namespace ref {

float mean_square(const float* x, int64_t n) {
  const float s = n < kLanes ? short_sum_squares(x, n) : cascade_sum_squares(x, n);
  return s / static_cast<float>(n);
}

void rms_norm(const float* x, int64_t n_rows, int64_t dim, const float* w, float eps, float* out) {
  for (int64_t t = 0; t < n_rows; ++t) {
    const float* xr = x + t * dim;
    float* yr = out + t * dim;
    const float r = 1.0f / std::sqrt(mean_square(xr, dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = w != nullptr ? w[i] * (xr[i] * r) : xr[i] * r;
  }
}

void rope_rotate(const RopeArgs& a) {
  const int64_t half = a.rope_dim / 2;
  for (int64_t v = 0; v < a.n_vec; ++v) {
    float* x = a.x + v * a.stride;
    for (int64_t i = 0; i < half; ++i) {
      const float re = x[2 * i], im = x[2 * i + 1];
      const float c = a.cos[i], s = a.inverse ? -a.sin[i] : a.sin[i];
      x[2 * i] = re * c - im * s;
      x[2 * i + 1] = re * s + im * c;
    }
  }
}

}  // namespace ref
}  // namespace strata::kernels
