#include "tools/eval_math.h"

#include <algorithm>
#include <cmath>

namespace strata::tools {

namespace {

template <typename T>
double log_softmax_impl(std::span<const T> x, std::span<double> out) {
  double mx = static_cast<double>(x[0]);
  for (T v : x) mx = std::max(mx, static_cast<double>(v));
  double sum = 0;
  for (T v : x) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  for (size_t j = 0; j < x.size(); ++j) out[j] = static_cast<double>(x[j]) - lse;
  return lse;
}

}  // namespace

double log_softmax(std::span<const float> x, std::span<double> out) { return log_softmax_impl(x, out); }
double log_softmax(std::span<const double> x, std::span<double> out) { return log_softmax_impl(x, out); }

double kl_divergence(std::span<const double> base_logp, std::span<const double> cur_logp) {
  double kl = 0;
  for (size_t j = 0; j < base_logp.size(); ++j) kl += std::exp(base_logp[j]) * (base_logp[j] - cur_logp[j]);
  return kl;
}

int32_t argmax(std::span<const double> x) {
  size_t best = 0;
  for (size_t j = 1; j < x.size(); ++j)
    if (x[j] > x[best]) best = j;
  return static_cast<int32_t>(best);
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(p, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return v[lo] + frac * (v[hi] - v[lo]);
}

double PplAccumulator::ppl() const { return std::exp(mean_nll()); }

double PplAccumulator::ppl_stderr() const {
  if (n_ < 2) return 0;
  const double n = static_cast<double>(n_);
  const double mean = sum_ / n;
  const double var = std::max(0.0, sum2_ / n - mean * mean);
  return ppl() * std::sqrt(var / (n - 1));
}

void encode_row(std::span<const double> logp, EncodedRow* row) {
  double lo = logp[0], hi = logp[0];
  for (double v : logp) lo = std::min(lo, v), hi = std::max(hi, v);
  // ROUNDING: scale and min are stored as f32 (EncodedRow); codes are computed against the f32
  // values actually stored, so decoding reproduces the grid the codes were chosen on.
  row->min_logp = static_cast<float>(lo);
  row->scale = static_cast<float>((hi - lo) / 65535.0);
  row->codes.resize(logp.size());
  const double mn = row->min_logp, sc = row->scale;
  for (size_t j = 0; j < logp.size(); ++j) {
    const double q = sc > 0 ? std::nearbyint((logp[j] - mn) / sc) : 0.0;
    row->codes[j] = static_cast<uint16_t>(std::clamp(q, 0.0, 65535.0));
  }
}

void decode_row(const EncodedRow& row, std::span<double> out) {
  const double mn = row.min_logp, sc = row.scale;
  for (size_t j = 0; j < row.codes.size(); ++j) out[j] = mn + sc * static_cast<double>(row.codes[j]);
  log_softmax(std::span<const double>(out.data(), row.codes.size()), out);
}

}  // namespace strata::tools
