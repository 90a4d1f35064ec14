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
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

Sampler::Sampler(const SamplerOptions& opt) : opt_(opt), rng_(opt.seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  if (opt_.temperature == 0.0f) return argmax(logits);
  const float inv_t = 1.0f / opt_.temperature;
  cand_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_[i] = {logits[i] * inv_t, static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = cand_.size();
  if (opt_.top_k > 0 && static_cast<size_t>(opt_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + opt_.top_k, cand_.end(), by_logit);
    n = static_cast<size_t>(opt_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Softmax over the survivors (sorted, so the first is the max).
  const float mx = cand_[0].first;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].first = std::exp(cand_[i].first - mx);
    sum += cand_[i].first;
  }
  // top-p: the smallest prefix whose mass reaches top_p.
  if (opt_.top_p < 1.0f) {
    double acc = 0.0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      acc += cand_[i].first / sum;
      if (acc >= opt_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  // min-p: drop tokens below min_p times the top probability.
  if (opt_.min_p > 0.0f) {
    const float floor = opt_.min_p * cand_[0].first;
    size_t keep = 1;
    while (keep < n && cand_[keep].first >= floor) ++keep;
    n = keep;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].first;
  std::uniform_real_distribution<double> u(0.0, total);
  const double r = u(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += cand_[i].first;
    if (r < acc) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace strata::runtime
