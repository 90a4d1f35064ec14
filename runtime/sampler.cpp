#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace strata::runtime {

Status SamplerOptions::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return InvalidArgument("temperature " + std::to_string(temperature) + " must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgument("top_p " + std::to_string(top_p) + " must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p < 1.0f)) return InvalidArgument("min_p " + std::to_string(min_p) + " must be in [0, 1)");
  if (top_k < 0) return InvalidArgument("top_k " + std::to_string(top_k) + " must be >= 0");
  return Status();
}

int32_t argmax(std::span<const float> logits) {
  // The first index of the largest value (NaN never wins). Two passes: eight independent running
  // maxima (no loop-carried compare-and-branch on one index: ~5x faster over a 129K vocabulary,
  // a measurable share of a small model's greedy step), then the first position holding it.
  const size_t n = logits.size();
  if (n == 0) return 0;
  float m[8];
  for (float& v : m) v = -INFINITY;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) m[j] = logits[i + static_cast<size_t>(j)] > m[j] ? logits[i + static_cast<size_t>(j)] : m[j];
  float mx = -INFINITY;
  for (; i < n; ++i) mx = logits[i] > mx ? logits[i] : mx;
  for (float v : m) mx = v > mx ? v : mx;
  for (size_t k = 0; k < n; ++k)
    if (logits[k] == mx) return static_cast<int32_t>(k);
  return 0;  // every value NaN
}

void apply_penalties(std::span<const float> logits, std::span<const int32_t> generated, float presence, float frequency,
                     std::vector<float>* out) {
  out->assign(logits.begin(), logits.end());
  std::vector<int32_t> sorted(generated.begin(), generated.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size();) {
    size_t k = i;
    while (k < sorted.size() && sorted[k] == sorted[i]) ++k;
    const int32_t tok = sorted[i];
    if (tok >= 0 && static_cast<size_t>(tok) < out->size())
      (*out)[static_cast<size_t>(tok)] -= frequency * static_cast<float>(k - i) + presence;
    i = k;
  }
}

Sampler::Sampler(const SamplerOptions& opt) : opt_(opt), rng_(opt.seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  if (opt_.temperature == 0.0f) return argmax(logits);
  const float inv_t = 1.0f / opt_.temperature;
  const size_t V = logits.size();
  // Unnormalised probabilities exp((l - max) / T); the top token has 1.
  float mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, l);
  auto more_likely = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  cand_.resize(V);
  for (size_t i = 0; i < V; ++i) cand_[i] = {std::exp((logits[i] - mx) * inv_t), static_cast<int32_t>(i)};
  size_t n = V;
  size_t sorted = 0;  // cand_[0, sorted) is sorted most likely first
  if (opt_.top_k > 0 && static_cast<size_t>(opt_.top_k) < n) {
    std::nth_element(cand_.begin(), cand_.begin() + opt_.top_k, cand_.end(), more_likely);
    n = static_cast<size_t>(opt_.top_k);
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].first;
  // top-p: the smallest most-likely prefix whose mass reaches top_p. Sort only as far as needed
  // (a full sort of 129K logits per token costs more than the rest of a small model's step).
  if (opt_.top_p < 1.0f) {
    const double want = opt_.top_p * total;
    double acc = 0.0;
    size_t keep = n;
    for (size_t k = std::min<size_t>(64, n);; k = std::min(n, k * 4)) {
      std::partial_sort(cand_.begin() + sorted, cand_.begin() + k, cand_.begin() + n, more_likely);
      for (; sorted < k; ++sorted) {
        acc += cand_[sorted].first;
        if (acc >= want) break;
      }
      if (sorted < k) {
        keep = sorted + 1;
        break;
      }
      if (k == n) break;
    }
    n = keep;
  }
  // min-p: drop tokens below min_p times the top probability (the top has 1 here).
  if (opt_.min_p > 0.0f) {
    size_t w = 0;
    for (size_t i = 0; i < n; ++i)
      if (cand_[i].first >= opt_.min_p) cand_[w++] = cand_[i];
    n = std::max<size_t>(w, 1);
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += cand_[i].first;
  std::uniform_real_distribution<double> u(0.0, sum);
  const double r = u(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += cand_[i].first;
    if (r < acc) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace strata::runtime
