// Per-token log-probabilities for the API's `logprobs` / `top_logprobs` (OpenAI's definition: the
// log of the probability the distribution gave the token, plus the most likely alternatives).
//
// The distribution is the one the sampler draws from before its filters: log-softmax of
// logits / T over the whole vocabulary, with the OpenAI penalties applied when the request has
// them (they change the sampled distribution). top-k, top-p and min-p are not applied (they only
// cut the draw; the reported numbers stay comparable across those settings).
// DECISION: greedy (T = 0) reports T = 1, the model's own distribution: its token is then the
// top-1 alternative. OpenAI does not document the temperature its logprobs are taken at; what
// users report is that they do not change with temperature (the model's own distribution).
// Thread safety: pure functions; a LogprobScratch belongs to one thread.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace strata::runtime {

// Most alternatives a request may ask for (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;

// One generated token's report.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;  // <= 0
  // The `top_n` most likely tokens (id, logprob), most likely first, lower id first on ties; only
  // tokens with a finite logit, so under a grammar's mask only allowed tokens (fewer than top_n
  // when fewer are allowed), and never a -infinity logprob.
  std::vector<std::pair<int32_t, float>> top;
};

// Fills *out for token `id` under log-softmax(logits / T) (T = `temperature`, 1 when it is 0).
// `top_n` in 0..kMaxTopLogprobs alternatives. O(vocab); allocates only out->top.
// REQUIRES: 0 <= id < logits.size().
void token_logprob(std::span<const float> logits, float temperature, int32_t id, int top_n, TokenLogprob* out);

}  // namespace strata::runtime
