#include "runtime/sampler.h"

#include <bit>

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

size_t Sampler::filter(std::span<const float> logits) {
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
  if (opt_.top_k > 0 && static_cast<size_t>(opt_.top_k) < n) {
    std::nth_element(cand_.begin(), cand_.begin() + opt_.top_k, cand_.end(), more_likely);
    n = static_cast<size_t>(opt_.top_k);
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].first;
  // top-p: the smallest most-likely prefix (by probability, then lower id) whose mass reaches
  // top_p, moved to the front in no particular order (the draw below only needs the set). O(n): a
  // histogram of the mass over the top 16 bits of each probability (positive floats order as their
  // bits), then a sort of the one bucket the boundary falls in. A full or growing partial sort
  // cost ~18 ms per token on a random-weight model's flat distribution over 129K tokens, on the
  // engine thread, once per stream of a batch.
  if (opt_.top_p < 1.0f) {
    const double want = opt_.top_p * total;
    auto key = [](float p) { return std::bit_cast<uint32_t>(p) >> 16; };
    uint32_t lo = UINT32_MAX, hi = 0;  // the keys in use: a few hundred buckets on a flat distribution
    for (size_t i = 0; i < n; ++i) {
      lo = std::min(lo, key(cand_[i].first));
      hi = std::max(hi, key(cand_[i].first));
    }
    bucket_mass_.assign(hi - lo + 1, 0.0);
    for (size_t i = 0; i < n; ++i) bucket_mass_[key(cand_[i].first) - lo] += cand_[i].first;
    double acc = 0.0;
    int64_t b = static_cast<int64_t>(hi - lo);
    for (; b >= 0; --b) {
      if (acc + bucket_mass_[static_cast<size_t>(b)] >= want) break;
      acc += bucket_mass_[static_cast<size_t>(b)];
    }
    b += lo;  // back to a key (b < lo: every bucket taken, rounding)
    if (b >= static_cast<int64_t>(lo)) {
      size_t above = 0;
      for (size_t i = 0; i < n; ++i)
        if (key(cand_[i].first) > static_cast<uint32_t>(b)) std::swap(cand_[above++], cand_[i]);
      size_t end = above;
      for (size_t i = above; i < n; ++i)
        if (key(cand_[i].first) == static_cast<uint32_t>(b)) std::swap(cand_[end++], cand_[i]);
      std::sort(cand_.begin() + static_cast<std::ptrdiff_t>(above), cand_.begin() + static_cast<std::ptrdiff_t>(end),
                more_likely);
      size_t keep = end;
      for (size_t i = above; i < end; ++i) {
        acc += cand_[i].first;
        if (acc >= want) {
          keep = i + 1;
          break;
        }
      }
      n = keep;
    }
  }
  // min-p: drop tokens below min_p times the top probability (the top has 1 here).
  if (opt_.min_p > 0.0f) {
    size_t w = 0;
    for (size_t i = 0; i < n; ++i)
      if (cand_[i].first >= opt_.min_p) cand_[w++] = cand_[i];
    n = std::max<size_t>(w, 1);
  }
  return n;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (opt_.temperature == 0.0f) return argmax(logits);
  const size_t n = filter(logits);
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

int32_t Sampler::sample_against(std::span<const float> logits, int32_t draft) {
  if (opt_.temperature == 0.0f) return argmax(logits);
  const size_t n = filter(logits);
  double sum = 0.0, p_draft = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sum += cand_[i].first;
    if (cand_[i].second == draft) p_draft = cand_[i].first;
  }
  // Accept with probability p(draft) (a draft outside the candidates has p = 0).
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  if (p_draft > 0 && u01(rng_) * sum < p_draft) return draft;
  // Rejected: a draw from p without the draft.
  const double rest = sum - p_draft;
  if (!(rest > 0)) return draft;  // the draft holds all the mass (accepted above unless rounding)
  std::uniform_real_distribution<double> u(0.0, rest);
  const double r = u(rng_);
  double acc = 0.0;
  int32_t last = draft;
  for (size_t i = 0; i < n; ++i) {
    if (cand_[i].second == draft) continue;
    acc += cand_[i].first;
    last = cand_[i].second;
    if (r < acc) return last;
  }
  return last;
}

}  // namespace strata::runtime
