#include "runtime/sampler.h"

#include <bit>

#include <algorithm>
#include <cmath>
#include <cstring>
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
  // The first index of the largest value (NaN never wins). One pass over 16 independent lanes, each
  // keeping its largest value and the first index that held it (strictly greater replaces, so the
  // earlier index stays), then the smallest index among the lanes holding the overall largest value.
  // Indices are kept as floats (exact below 2^24) so every lane operation is a float compare and
  // select, which the compiler vectorizes: a 129K vocabulary is read once, not up to twice (a
  // serial share of every greedy step, paid once per stream of a batch).
  const size_t n = logits.size();
  if (n == 0) return 0;
  // Four vectors of four lanes (GCC/Clang vector extensions: SSE2 on baseline x86-64, NEON elsewhere).
  using F4 = float __attribute__((vector_size(16)));
  constexpr size_t kLanes = 16;
  F4 mv[4], atv[4];
  for (int k = 0; k < 4; ++k) {
    mv[k] = F4{} - INFINITY;
    atv[k] = F4{} - 1.0f;
  }
  const size_t main = n < (size_t{1} << 24) ? n / kLanes * kLanes : 0;  // larger: all in the tail loop
  const float* v = logits.data();
  F4 idx[4];
  for (int k = 0; k < 4; ++k) idx[k] = F4{0.0f, 1.0f, 2.0f, 3.0f} + static_cast<float>(4 * k);
  for (size_t i = 0; i < main; i += kLanes) {
    for (int k = 0; k < 4; ++k) {
      F4 x;
      std::memcpy(&x, v + i + 4 * static_cast<size_t>(k), sizeof(x));
      const auto gt = x > mv[k];
      mv[k] = gt ? x : mv[k];
      atv[k] = gt ? idx[k] : atv[k];
      idx[k] += static_cast<float>(kLanes);
    }
  }
  float m[kLanes], at[kLanes];
  std::memcpy(m, mv, sizeof(m));
  std::memcpy(at, atv, sizeof(at));
  float mx = -INFINITY;
  for (float x : m) mx = x > mx ? x : mx;
  size_t best = n;
  for (size_t j = 0; j < kLanes; ++j)
    if (m[j] == mx && at[j] >= 0.0f) best = std::min(best, static_cast<size_t>(at[j]));
  for (size_t i = main; i < n; ++i)  // the tail: indices after every lane's
    if (logits[i] > mx) {
      mx = logits[i];
      best = i;
    }
  if (best == n) {  // every value -inf or NaN: the first -inf, else 0
    for (size_t k = 0; k < n; ++k)
      if (logits[k] == -INFINITY) return static_cast<int32_t>(k);
    return 0;
  }
  return static_cast<int32_t>(best);
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
