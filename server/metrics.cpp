#include "server/metrics.h"

#include <cstdio>

namespace strata::server {

namespace {

std::string fmt(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

void header(std::string* out, const std::string& name, const char* type, const std::string& help) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void scalar(std::string* out, const std::string& name, const char* type, const std::string& help, double v) {
  header(out, name, type, help);
  *out += name + " " + fmt(v) + "\n";
}

const std::vector<double> kLatencyBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
const std::vector<double> kBatchBounds = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128};
const std::vector<double> kStepTokenBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
const std::vector<double> kTokenBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> l(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string* out) const {
  std::lock_guard<std::mutex> l(mu_);
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    *out += name + "_bucket{le=\"" + fmt(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  *out += name + "_sum " + fmt(sum_) + "\n";
  *out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : time_to_first_token(kLatencyBounds),
      inter_token_latency(kTokenBounds),
      request_duration(kLatencyBounds),
      batch_size(kBatchBounds),
      step_tokens(kStepTokenBounds) {}

void Metrics::count_request(int http_status) {
  std::lock_guard<std::mutex> l(mu_);
  ++requests_by_status_[http_status];
}

void Metrics::add_collector(std::function<std::string()> collector) {
  std::lock_guard<std::mutex> l(mu_);
  collectors_.push_back(std::move(collector));
}

std::string Metrics::render(const Gauges& g) const {
  std::string out;
  {
    std::lock_guard<std::mutex> l(mu_);
    header(&out, "strata_requests_total", "counter", "HTTP requests answered, by status code.");
    for (const auto& [status, n] : requests_by_status_)
      out += "strata_requests_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  }
  const double prompt = static_cast<double>(prompt_tokens.load());
  const double cached = static_cast<double>(prompt_tokens_cached.load());
  scalar(&out, "strata_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", prompt);
  scalar(&out, "strata_prompt_tokens_cached_total", "counter", "Prompt tokens reused from a session (prefix reuse).",
         cached);
  scalar(&out, "strata_generation_tokens_total", "counter", "Sampled tokens.", double(generation_tokens.load()));
  scalar(&out, "strata_reasoning_tokens_total", "counter", "Sampled tokens inside reasoning.",
         double(reasoning_tokens.load()));
  const double pre_s = double(prefill_ns.load()) * 1e-9, dec_s = double(decode_ns.load()) * 1e-9;
  scalar(&out, "strata_prefill_seconds_total", "counter", "Time spent in prefill forwards.", pre_s);
  scalar(&out, "strata_decode_seconds_total", "counter", "Time spent in decode forwards.", dec_s);
  scalar(&out, "strata_prefill_tokens_per_second", "gauge", "Prefilled (non-cached) prompt tokens per prefill second.",
         pre_s > 0 ? (prompt - cached) / pre_s : 0);
  scalar(&out, "strata_decode_tokens_per_second", "gauge",
         "Decode tokens per decode second, all slots together (a batched step decodes one token per slot).",
         dec_s > 0 ? double(decode_tokens.load()) / dec_s : 0);
  scalar(&out, "strata_engine_steps_total", "counter", "Engine steps (one batched forward each).", double(steps.load()));
  scalar(&out, "strata_spec_cycles_total", "counter", "Speculative decoding: verification forwards.",
         double(spec_cycles.load()));
  scalar(&out, "strata_spec_drafted_total", "counter", "Speculative decoding: draft tokens verified.",
         double(spec_drafted.load()));
  scalar(&out, "strata_spec_accepted_total", "counter", "Speculative decoding: draft tokens accepted.",
         double(spec_accepted.load()));
  scalar(&out, "strata_spec_guard_pauses_total", "counter",
         "Speculative decoding: times the guard turned drafting off because it did not pay.",
         double(spec_guard_pauses.load()));
  scalar(&out, "strata_prefix_cache_hit_rate", "gauge", "Cached prompt tokens / prompt tokens.",
         prompt > 0 ? cached / prompt : 0);
  scalar(&out, "strata_requests_running", "gauge", "Requests generating.", g.running);
  scalar(&out, "strata_requests_waiting", "gauge", "Requests queued for a slot.", g.waiting);
  scalar(&out, "strata_kv_sessions", "gauge", "Slots holding a KV cache.", g.sessions);
  scalar(&out, "strata_kv_bytes", "gauge", "Bytes the slots' KV caches hold (as of the last engine step).",
         double(g.kv_bytes));
  scalar(&out, "strata_prefix_rewinds_total", "counter",
         "Admissions that reused a slot's session by cutting it back to the prompt's common prefix (Session::rewind).",
         double(prefix_rewinds.load()));
  scalar(&out, "strata_prefix_cache_entries", "gauge", "Session snapshots in the prefix cache.",
         double(g.prefix_cache_entries));
  scalar(&out, "strata_prefix_cache_bytes", "gauge", "Bytes the prefix cache holds.", double(g.prefix_cache_bytes));
  scalar(&out, "strata_prefix_cache_lookups_total", "counter", "Prefix cache lookups (one per admission).",
         double(g.prefix_cache_lookups));
  scalar(&out, "strata_prefix_cache_hits_total", "counter", "Prefix cache lookups that resumed a snapshot.",
         double(g.prefix_cache_hits));
  time_to_first_token.render("strata_time_to_first_token_seconds", "Seconds from request to first token.", &out);
  inter_token_latency.render("strata_inter_token_latency_seconds", "Seconds between two tokens of a request.", &out);
  request_duration.render("strata_request_duration_seconds", "Seconds from request to its end.", &out);
  batch_size.render("strata_batch_size", "Sequences per engine step (decoding slots + prompt chunks in one forward).",
                    &out);
  step_tokens.render("strata_step_tokens", "Tokens per engine step (decode tokens + prompt chunk tokens).", &out);
  std::vector<std::function<std::string()>> cs;
  {
    std::lock_guard<std::mutex> l(mu_);
    cs = collectors_;
  }
  for (const auto& c : cs) out += c();
  return out;
}

}  // namespace strata::server
