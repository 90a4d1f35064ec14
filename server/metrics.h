// Metrics: the server's Prometheus counters, gauges and histograms (chat-and-api.md §6.5), and
// their text exposition (format 0.0.4) for GET /metrics.
// Thread safety: every method may be called from any thread (atomics, one mutex for the maps).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace strata::server {

// A cumulative histogram with fixed upper bounds (seconds, or a count for the batch histograms).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends `name`_bucket{le=...}, _sum and _count lines.
  void render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bound, plus +Inf last
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Gauges {
  int running = 0;   // requests generating
  int waiting = 0;   // requests queued for a slot
  int sessions = 0;  // slots holding a KV cache
  uint64_t kv_bytes = 0;             // bytes those KV caches hold (as of the last engine step)
  int64_t prefix_cache_entries = 0;  // runtime::PrefixCache snapshots
  uint64_t prefix_cache_bytes = 0;
  int64_t prefix_cache_lookups = 0, prefix_cache_hits = 0;
};

class Metrics {
 public:
  Metrics();

  void count_request(int http_status);
  std::atomic<uint64_t> prompt_tokens{0};         // prompt tokens of admitted requests
  std::atomic<uint64_t> prompt_tokens_cached{0};  // ... reused from a slot's session
  std::atomic<uint64_t> prefix_rewinds{0};        // admissions that rewound a slot's session to reuse it
  std::atomic<uint64_t> generation_tokens{0};     // sampled tokens
  std::atomic<uint64_t> reasoning_tokens{0};      // ... of them counted as reasoning
  std::atomic<uint64_t> prefill_ns{0};            // time in prefill forwards
  std::atomic<uint64_t> decode_ns{0};             // time in decode forwards
  std::atomic<uint64_t> decode_forwards{0};       // engine steps that ran decode tokens
  std::atomic<uint64_t> decode_tokens{0};         // decode tokens run (one per decoding slot per step)
  std::atomic<uint64_t> steps{0};                 // engine steps (one batched forward each)
  // Speculative decoding (--spec dspark|draft; runtime::SpecStats), summed over finished requests.
  std::atomic<uint64_t> spec_cycles{0};        // verification forwards
  std::atomic<uint64_t> spec_drafted{0};       // drafts verified
  std::atomic<uint64_t> spec_accepted{0};      // drafts the target accepted
  std::atomic<uint64_t> spec_guard_pauses{0};  // times the guard turned drafting off

  Histogram time_to_first_token;   // seconds, submit -> first token
  Histogram inter_token_latency;   // seconds between tokens of one request
  Histogram request_duration;      // seconds, submit -> end
  // Continuous batching (issue 14 item 5), one observation per engine step: sequences in the
  // forward (decoding slots + prompt chunks), and its rows (decode tokens + prompt chunk tokens).
  Histogram batch_size;
  Histogram step_tokens;

  // Extra exposition text appended to /metrics (storage-tier metrics added by their owners).
  void add_collector(std::function<std::string()> collector);

  // The full exposition.
  std::string render(const Gauges& g) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> requests_by_status_;
  std::vector<std::function<std::string()>> collectors_;
};

}  // namespace strata::server
