#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace strata::model {

RopeTable::RopeTable(const RopeParams& p) : p_(p) {
  const int64_t half = p.rope_dim / 2;
  freqs_.resize(static_cast<size_t>(half));
  const float base = static_cast<float>(p.theta);
  for (int64_t i = 0; i < half; ++i) {
    // ROUNDING: f32 as the reference: base ** (arange(0, dim, 2) / dim) in f32.
    const float e = static_cast<float>(2 * i) / static_cast<float>(p.rope_dim);
    freqs_[static_cast<size_t>(i)] = 1.0f / std::pow(base, e);
  }
  if (p.original_seq_len > 0) {
    // YaRN: keep high-frequency dims, divide low-frequency ones by `factor`, ramp in between.
    auto corrected_dim = [&](double rotations) {
      return static_cast<double>(p.rope_dim) *
             std::log(static_cast<double>(p.original_seq_len) / (rotations * 2 * M_PI)) / (2 * std::log(p.theta));
    };
    const double low = std::max(std::floor(corrected_dim(p.beta_fast)), 0.0);
    const double high = std::min(std::ceil(corrected_dim(p.beta_slow)), static_cast<double>(p.rope_dim - 1));
    const float span = static_cast<float>(std::max(high - low, 1e-3));
    const float factor = static_cast<float>(p.factor);
    for (int64_t i = 0; i < half; ++i) {
      float ramp = (static_cast<float>(i) - static_cast<float>(low)) / span;
      ramp = std::clamp(ramp, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      float& f = freqs_[static_cast<size_t>(i)];
      f = f / factor * (1.0f - smooth) + f * smooth;
    }
  }
}

void RopeTable::ensure(int64_t n_positions) {
  if (n_positions <= n_pos_) return;
  // Grow geometrically so decode does not recompute the table every step.
  const int64_t n = std::max(n_positions, std::max<int64_t>(n_pos_ * 2, 1024));
  const int64_t half = p_.rope_dim / 2;
  cos_.resize(static_cast<size_t>(n * half));
  sin_.resize(static_cast<size_t>(n * half));
  for (int64_t pos = n_pos_; pos < n; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      // ROUNDING: the angle is the f32 product pos * freq (torch.outer in f32); cos/sin of that f32.
      const float angle = static_cast<float>(pos) * freqs_[static_cast<size_t>(i)];
      cos_[static_cast<size_t>(pos * half + i)] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_[static_cast<size_t>(pos * half + i)] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  n_pos_ = n;
}

void RopeTable::apply(float* x, int64_t pos, bool inverse) const {
  const int64_t half = p_.rope_dim / 2;
  const float* c = cos_.data() + pos * half;
  const float* s = sin_.data() + pos * half;
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t i = 0; i < half; ++i) {
    const float re = x[2 * i], im = x[2 * i + 1];
    const float si = sign * s[i];
    x[2 * i] = re * c[i] - im * si;
    x[2 * i + 1] = re * si + im * c[i];
  }
}

}  // namespace strata::model
