// Scalar definitions of kernels/activation.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/activation.h"
#include "kernels/detail/exp_table.h"

namespace strata::kernels {

float exp_f32(float x) {
  uint32_t ux;
  std::memcpy(&ux, &x, sizeof ux);
  const uint32_t abstop = (ux >> 20) & 0x7FF;
  if (abstop >= 0x42B) {  // |x| >= 88, inf or NaN
    if (ux == 0xFF800000u) return 0.0f;
    if (abstop >= 0x7F8) return x + x;
    if (x > detail::kExpOverflowAbove) return INFINITY;
    if (x < detail::kExpUnderflowBelow) return 0.0f;
    if (x < detail::kExpMayUnderflowBelow) return detail::kExpMayUnderflowValue;
  }
  // x * 32/ln2 = k + r, k an integer (rounded to nearest by the shift), |r| <= 1/2.
  const double xd = x;
  double kd = std::fma(detail::kExpInvLn2N, xd, detail::kExpShift);
  uint64_t ki;
  std::memcpy(&ki, &kd, sizeof ki);
  kd -= detail::kExpShift;
  const double r = std::fma(detail::kExpInvLn2N, xd, -kd);
  // 2^(k/32) from the table entry of k % 32 with k / 32 added to the exponent (k << 47 carries it).
  const uint64_t t = detail::kExpTable[ki & 31] + (ki << 47);
  double s;
  std::memcpy(&s, &t, sizeof s);
  const double z = std::fma(detail::kExpC0, r, detail::kExpC1);
  const double r2 = r * r;
  double y = std::fma(detail::kExpC2, r, 1.0);
  y = std::fma(z, r2, y);
  // ROUNDING: one rounding of the double result to f32 (glibc expf).
  return static_cast<float>(y * s);
}

namespace ref {

void exp_f32(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = kernels::exp_f32(x[i]);
}

void swiglu(const SwigluArgs& a) {
  const float lim = a.limit;
  for (int64_t t = 0; t < a.n; ++t) {
    for (int64_t i = 0; i < a.inter; ++i) {
      float g = a.gate[t * a.inter + i], u = a.up[t * a.inter + i];
      if (lim > 0) {
        u = std::clamp(u, -lim, lim);
        g = std::min(g, lim);
      }
      float v = silu_f32(g) * u;
      if (a.row_scale) v = a.row_scale[t] * v;
      a.out[t * a.inter + i] = v;
    }
  }
}

}  // namespace ref
}  // namespace strata::kernels
