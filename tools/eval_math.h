// The arithmetic of `strata eval` (tools/eval.h): log-softmax, KL divergence, perplexity with its
// standard error, percentiles, and the u16 row code of the eval base file (tools/eval_base.h).
// Scalar and straightforward on purpose: every sum runs in double, in index order, so two runs on
// the same input give the same bits (eval's "identical model -> KLD exactly 0" relies on it).
// Source: llama.cpp tools/perplexity/perplexity.cpp (log_softmax, process_logits, the
// --kl-divergence statistics); the numbers are defined here, not copied.
// Thread safety: pure functions, and a PplAccumulator used by one thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace strata::tools {

// out[j] = x[j] - logsumexp(x), in double. Returns logsumexp(x).
//   x   [n]  f32 logits (or f64 log-probabilities to renormalise), finite, n >= 1
//   out [n]  f64 log-probabilities (natural log)
double log_softmax(std::span<const float> x, std::span<double> out);
double log_softmax(std::span<const double> x, std::span<double> out);

// KL(base || cur) = sum_j exp(base[j]) * (base[j] - cur[j]), in nats (>= 0 up to rounding; exactly
// 0 when the spans hold the same values). Both are normalised log-probabilities [n] f64.
double kl_divergence(std::span<const double> base_logp, std::span<const double> cur_logp);

// Index of the largest value; the first one on ties. n >= 1.
int32_t argmax(std::span<const double> x);

// The p-quantile (p in [0, 1]) of `v` with linear interpolation between order statistics (numpy's
// default): sorted[(n-1)p] interpolated. 0 for an empty `v`. Sorts `v`.
double percentile(std::vector<double>& v, double p);

// Mean negative log-likelihood -> perplexity. ppl = exp(mean nll); its standard error by the delta
// method, ppl * sqrt(var(nll) / (n - 1)) with var the population variance (as llama-perplexity
// reports "PPL = x +/- e"); 0 when n < 2.
class PplAccumulator {
 public:
  void add(double nll) {
    sum_ += nll;
    sum2_ += nll * nll;
    ++n_;
  }
  int64_t count() const { return n_; }
  double mean_nll() const { return n_ > 0 ? sum_ / static_cast<double>(n_) : 0.0; }
  double ppl() const;
  double ppl_stderr() const;

 private:
  double sum_ = 0, sum2_ = 0;
  int64_t n_ = 0;
};

// One position's distribution in the base file's code (llama-perplexity's --kl-divergence-base
// idea: log-probs on a uniform 16-bit grid between the row's min and max):
//   logp[j] ~= min_logp + scale * codes[j],  scale = (max_logp - min_logp) / 65535
// ROUNDING: the grid step is (range of log-probs) / 65535, e.g. 6e-4 nats for a 40-nat range; the
// KLD it adds is ~step^2/12 (~3e-8 nats), far below any quantisation variant's. Decoding is followed
// by a renormalising log_softmax, so a decoded row is a distribution.
struct EncodedRow {
  float scale = 0;              // f32 nats per code step (0 when the row is uniform)
  float min_logp = 0;           // f32 nats, the row's smallest log-prob
  std::vector<uint16_t> codes;  // [vocab] code of each log-prob
};

// Encodes normalised log-probs `logp` [n] into `row` (codes resized to n).
void encode_row(std::span<const double> logp, EncodedRow* row);

// Decodes `row` into normalised log-probs out [codes.size()] f64 (renormalised, see EncodedRow).
void decode_row(const EncodedRow& row, std::span<double> out);

}  // namespace strata::tools
