#include "tools/synth_skew.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "tools/synth_fill.h"

namespace strata::tools {

namespace {

inline uint64_t mix64(uint64_t z) {  // splitmix64 output function
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Topic direction t, element i: N(0, 1) from the quantile table.
inline float topic_value(uint64_t topic_key, int t, int64_t i, const float* normal) {
  const uint64_t x = mix64(topic_key ^ mix64(static_cast<uint64_t>(t) * 0x10001ull + 7) ^ static_cast<uint64_t>(i));
  return normal[x & 0xFFFF];
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void apply_routing_skew(const model::ModelConfig& c, uint64_t seed, double skew, std::vector<SynthTensor>* tensors) {
  if (!(skew >= 0)) return;
  const uint64_t topic_key = fill_key(seed, "routing_skew.topics");
  const double beta = 0.5 * skew;
  const double gamma = 4.0 * std::sqrt(1.0 + beta * beta) / static_cast<double>(c.dim);
  for (SynthTensor& t : *tensors) {
    if (t.fill != FillKind::kNormal) continue;
    RoutingSkew r;
    r.topic_key = topic_key;
    r.n_topics = kSkewTopics;
    r.layer_key = fill_key(seed, "routing_skew." + t.decl.name);
    const std::string& n = t.decl.name;
    if (n == "embed.weight" && skew > 0) {
      r.kind = RoutingSkew::Kind::kEmbedTopic;
      r.gain = static_cast<float>(beta);
    } else if (ends_with(n, ".ffn.gate.weight") && skew > 0) {
      r.kind = RoutingSkew::Kind::kGateTopic;
      r.gain = static_cast<float>(gamma);
    } else if (ends_with(n, ".ffn.gate.bias")) {
      // The plain generator's N(0, 0.3) bias is itself a strong static skew: replace it.
      r.kind = RoutingSkew::Kind::kBiasZipf;
      r.gain = static_cast<float>(0.15 * skew);
      t.std = 0;
    } else {
      continue;
    }
    t.skew = r;
  }
}

void routing_skew_row(const SynthTensor& t, int64_t row, int64_t n, const float* normal, float* out) {
  const RoutingSkew& r = t.skew;
  switch (r.kind) {
    case RoutingSkew::Kind::kEmbedTopic: {
      const int topic = static_cast<int>(mix64(r.topic_key ^ static_cast<uint64_t>(row)) % static_cast<uint64_t>(r.n_topics));
      for (int64_t i = 0; i < n; ++i) out[i] = r.gain * topic_value(r.topic_key, topic, i, normal);
      return;
    }
    case RoutingSkew::Kind::kGateTopic: {
      const int64_t offset = static_cast<int64_t>(mix64(r.layer_key) % static_cast<uint64_t>(r.n_topics));
      const int topic = static_cast<int>((row + offset) % r.n_topics);
      for (int64_t i = 0; i < n; ++i) out[i] = r.gain * topic_value(r.topic_key, topic, i, normal);
      return;
    }
    case RoutingSkew::Kind::kBiasZipf: {
      // rank = position of expert e when the experts are sorted by a per-layer random key.
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return mix64(r.layer_key ^ static_cast<uint64_t>(a)) < mix64(r.layer_key ^ static_cast<uint64_t>(b));
      });
      for (int64_t rank = 0; rank < n; ++rank)
        out[order[static_cast<size_t>(rank)]] = -r.gain * static_cast<float>(std::log1p(static_cast<double>(rank)));
      return;
    }
    case RoutingSkew::Kind::kNone: break;
  }
  std::fill(out, out + n, 0.0f);
}

}  // namespace strata::tools
