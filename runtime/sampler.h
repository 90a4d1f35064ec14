// Sampler: picks the next token from a row of logits.
//
// temperature 0 is greedy (argmax, lowest id on ties). Otherwise: logits / temperature, softmax,
// then the filters in llama.cpp's order — top-k (0 = off), top-p (nucleus; 1 = off), min-p
// (drop tokens below min_p * max probability; 0 = off) — and a draw from the renormalised
// distribution with a seeded generator, so a seed reproduces a run.
// Thread safety: one Sampler per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"

namespace strata::runtime {

struct SamplerOptions {
  float temperature = 0.6f;  // 0 = greedy
  float top_p = 0.95f;       // (0, 1]
  float min_p = 0.0f;        // [0, 1)
  int top_k = 0;             // 0 = all tokens
  uint64_t seed = 0;         // generator seed

  // Errors name the field and the accepted range.
  [[nodiscard]] Status validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& opt);
  // Picks a token id from logits[0..vocab).
  int32_t sample(std::span<const float> logits);
  // Speculative sampling against a deterministic draft token `draft` (runtime/speculation.h: the
  // draft's distribution is a point mass): with p the distribution sample() draws from (temperature
  // and filters), returns `draft` with probability p(draft), otherwise a draw from p without the
  // draft token, renormalised — the standard rejection rule min(1, p(x)/q(x)) with q(x) = 1, whose
  // residual norm(max(0, p - q)) is p without x. The result is distributed exactly as sample()'s
  // (a rejected draft is never returned), but consumes the generator differently. Greedy: argmax.
  int32_t sample_against(std::span<const float> logits, int32_t draft);

 private:
  SamplerOptions opt_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<double> bucket_mass_;  // top-p histogram (sample())

  // The candidates sample() draws from: cand_[0..n) with unnormalised probabilities (temperature,
  // top-k, top-p, min-p applied); returns n. REQUIRES temperature > 0.
  size_t filter(std::span<const float> logits);
};

// OpenAI presence/frequency penalties (the API reference's formula): for every token id t that
// occurs c > 0 times in `generated`, logits[t] -= frequency * c + presence. Ids outside `logits` are
// ignored. Writes the result to *out (resized to logits.size()). Used by the generation loop only
// when a penalty is non-zero.
void apply_penalties(std::span<const float> logits, std::span<const int32_t> generated, float presence, float frequency,
                     std::vector<float>* out);

// Index of the largest value (lowest index on ties).
int32_t argmax(std::span<const float> logits);

}  // namespace strata::runtime
