// Routing skew for `strata synth --routing-skew S`: random routers pick experts about uniformly;
// real MoE routers do not (a few experts take most picks, and which ones follows the text). This
// adds that structure to a synthetic checkpoint so the expert cache can be benchmarked on it.
//
// Two parts, both deterministic functions of (seed, tensor, row) like every synth byte:
//  - Zipf popularity: each router's selection bias (ffn.gate.bias, which only selects) becomes
//    -0.15 * S * ln(1 + rank(e)), rank a per-layer permutation of the experts (rank 0 the most
//    popular), replacing the plain generator's N(0, 0.3) values (which favour random experts
//    strongly on their own: top 10% of experts take ~65% of picks, measured).
//  - Topics: n_topics = 16 random directions u_t in the hidden space (N(0, 1) elements). Token v has
//    topic hash(v) mod 16 and its embedding row gets beta * u_topic (beta = 0.5 * S); expert e of a
//    layer belongs to topic (e + layer offset) mod 16 and its router row gets gamma * u_topic, with
//    gamma = 4 * sqrt(1 + beta^2) / dim, i.e. a token's router logit for its own topic's experts
//    rises by about 2 * S where the residual stream still carries the embedding's direction. Text
//    whose vocabulary shifts (another document, code, another language) shifts the hot experts.
// S = 0 is the unbiased router (zero biases, no topics); S < 0 (unset) leaves the plain generator's
// bytes unchanged. Measured effect: docs/performance.md.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "tools/synth.h"

namespace strata::tools {

inline constexpr int kSkewTopics = 16;

// Marks embed.weight and every ffn.gate.weight / ffn.gate.bias in `tensors` with their RoutingSkew.
void apply_routing_skew(const model::ModelConfig& c, uint64_t seed, double skew, std::vector<SynthTensor>* tensors);

// The component RoutingSkew adds to row `row` of `t` (n values), written into out[0..n). `normal`
// is the [65536] N(0, 1) quantile table. REQUIRES t.skew.kind != kNone.
void routing_skew_row(const SynthTensor& t, int64_t row, int64_t n, const float* normal, float* out);

}  // namespace strata::tools
