#include "runtime/logprobs.h"

#include <algorithm>
#include <cmath>

namespace strata::runtime {

void token_logprob(std::span<const float> logits, float temperature, int32_t id, int top_n, TokenLogprob* out) {
  const float t = temperature > 0 ? temperature : 1.0f;
  const double inv_t = 1.0 / t;
  float mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, l);
  // ROUNDING: the normaliser is summed in double, so a 129K-token vocabulary does not lose the
  // small terms; the reported values are floats (OpenAI's JSON numbers carry about that much).
  double sum = 0;
  for (float l : logits) sum += std::exp((static_cast<double>(l) - mx) * inv_t);
  const double log_z = std::log(sum);
  auto logprob_of = [&](float l) { return static_cast<float>((static_cast<double>(l) - mx) * inv_t - log_z); };
  out->id = id;
  out->logprob = std::min(0.0f, logprob_of(logits[static_cast<size_t>(id)]));
  out->top.clear();
  const size_t n = std::min(static_cast<size_t>(std::clamp(top_n, 0, kMaxTopLogprobs)), logits.size());
  if (n == 0) return;
  // The n largest logits (lower id on ties): one pass keeping a small sorted list.
  auto better = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  std::vector<int32_t> best;
  best.reserve(n + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    const auto k = static_cast<int32_t>(i);
    if (logits[i] == -INFINITY) continue;  // masked (constrained decoding): never an alternative
    if (best.size() == n && !better(k, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), k, better), k);
    if (best.size() > n) best.pop_back();
  }
  for (int32_t k : best) out->top.emplace_back(k, std::min(0.0f, logprob_of(logits[static_cast<size_t>(k)])));
}

}  // namespace strata::runtime
