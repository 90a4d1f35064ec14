// session_bench: the sessions issue's measurements (#4), printed as markdown rows for
// docs/performance.md.
//
//   speed   exact vs replay prefill of random prompts at given lengths (median of --reps runs after
//           one warm-up at the smallest length), with the KV cache bytes each session holds;
//   quality exact vs replay logits on a token file: the last-token distributions of several prompt
//           prefixes and of `--decode` greedy steps continued from each (tokens forced to the exact
//           run's), as KL(exact || replay) in nats and top-1 agreement;
//   long    one prompt of --long tokens (replay or exact), its prefill rate, cache bytes and the
//           process's peak RSS.
// Every row names the command line, thread count and checkpoint.
#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "model/model.h"
#include "runtime/session.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace strata;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

double peak_rss_mb() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(std::min<int64_t>(vocab, 128000) - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = d(rng);
  return t;
}

// Prefill `tokens` into a fresh session; returns seconds.
double prefill(model::Model& m, const std::vector<int32_t>& tokens, runtime::PrefillMode mode, int64_t chunk,
               runtime::Session* out) {
  runtime::Session s(m);
  runtime::AppendOptions o;
  o.mode = mode;
  o.chunk = chunk;
  const auto t0 = clock_type::now();
  Status st = s.append(tokens, o);
  const double dt = seconds_since(t0);
  if (!st.ok()) {
    std::fprintf(stderr, "session_bench: %s\n", st.to_string().c_str());
    std::exit(1);
  }
  if (out) *out = std::move(s);
  return dt;
}

// KL(p || q) in nats of the softmaxes of two logit rows (double precision).
double kl(std::span<const float> p_logits, std::span<const float> q_logits) {
  auto log_softmax = [](std::span<const float> x) {
    double mx = -INFINITY;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    double z = 0;
    for (float v : x) z += std::exp(static_cast<double>(v) - mx);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]) - mx - std::log(z);
    return out;
  };
  const auto lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double k = 0;
  for (size_t i = 0; i < lp.size(); ++i) k += std::exp(lp[i]) * (lp[i] - lq[i]);
  return k;
}

int32_t argmax(std::span<const float> x) { return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin()); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata sessions benchmarks: exact vs replay prefill speed and logits, long context"};
  std::string dir, tokens_file, lengths_s = "512,2048,8192";
  int threads = 0, reps = 3, decode = 24;
  int64_t chunk = 2048, long_n = 0;
  std::string long_mode = "replay";
  app.add_option("-m,--model", dir, "checkpoint directory")->required();
  app.add_option("--lengths", lengths_s, "speed: prompt lengths (comma separated; empty = skip)");
  app.add_option("--reps", reps, "speed: runs per length (median)");
  app.add_option("--tokens", tokens_file,
                 "quality: JSON token ids: an array, or {\"ids\": [...]} (the v41-tiny tokens.json)");
  app.add_option("--decode", decode, "quality: greedy steps after each prefix");
  app.add_option("--long", long_n, "long: prompt length (0 = skip)");
  app.add_option("--long-mode", long_mode, "long: exact or replay");
  app.add_option("--chunk", chunk, "prefill chunk (tokens)");
  app.add_option("-t,--threads", threads, "threads (0 = physical cores)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::string cmdline = bench::command_line(argc, argv);

  auto loaded = bench::load_model(dir, threads);
  if (!loaded) return 1;
  model::Model& m = *loaded->model;
  const model::ModelConfig& c = m.config();
  std::printf("# %s\n# %s: dim %lld, %d layers, window %lld, %d threads, KV %.1f B/token\n", cmdline.c_str(), dir.c_str(),
              static_cast<long long>(c.dim), c.n_layers, static_cast<long long>(c.window_size), m.pool().n_threads(),
              model::kv_bytes_per_token(c));

  // ---- speed ----------------------------------------------------------------------------------------
  std::vector<int64_t> lengths;
  for (std::stringstream ss(lengths_s); ss.good();) {
    std::string item;
    std::getline(ss, item, ',');
    if (!item.empty()) lengths.push_back(std::stoll(item));
  }
  if (!lengths.empty()) {
    std::printf("\n| prompt tokens | exact s | exact tok/s | replay s | replay tok/s | replay speed-up | cache bytes (exact) |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    prefill(m, random_tokens(std::min<int64_t>(lengths.front(), 256), c.vocab_size, 1), runtime::PrefillMode::kExact,
            chunk, nullptr);  // warm-up: page in the weights
    for (int64_t n : lengths) {
      const auto t = random_tokens(n, c.vocab_size, static_cast<uint64_t>(n));
      std::vector<double> te, tr;
      uint64_t bytes = 0;
      for (int r = 0; r < reps; ++r) {
        runtime::Session s(m);
        te.push_back(prefill(m, t, runtime::PrefillMode::kExact, chunk, &s));
        bytes = s.cache().bytes();
        tr.push_back(prefill(m, t, runtime::PrefillMode::kReplay, chunk, nullptr));
      }
      std::sort(te.begin(), te.end());
      std::sort(tr.begin(), tr.end());
      const double e = te[te.size() / 2], rr = tr[tr.size() / 2];
      std::printf("| %lld | %.2f | %.1f | %.2f | %.1f | %.2fx | %.2f MB |\n", static_cast<long long>(n), e, n / e, rr,
                  n / rr, e / rr, bytes / 1e6);
      std::fflush(stdout);
    }
  }

  // ---- quality --------------------------------------------------------------------------------------
  if (!tokens_file.empty()) {
    std::ifstream f(tokens_file);
    std::stringstream ss;
    ss << f.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    // Either {"ids": [...]} (a fixture's tokens.json) or a bare array (`strata tokenize` output).
    if (!j.is_discarded() && j.is_object() && j.contains("ids")) j = j["ids"];
    const auto is_id = [](const nlohmann::json& v) { return v.is_number_integer(); };
    if (j.is_discarded() || !j.is_array() || j.empty() || !std::all_of(j.begin(), j.end(), is_id))
      return std::fprintf(stderr, "%s: expected a JSON array of token ids or {\"ids\": [...]}\n", tokens_file.c_str()), 1;
    const auto ids = j.get<std::vector<int32_t>>();
    std::printf("\n| prompt prefix | KL prefill (nats) | top-1 prefill | mean KL over %d decode steps | max KL | top-1 agreement (decode) |\n", decode);
    std::printf("|---:|---:|---:|---:|---:|---:|\n");
    double kl_sum = 0;
    int agree = 0, steps = 0, prompts = 0, prompt_agree = 0;
    const int64_t W = c.window_size;
    int64_t prev = 0;
    for (int64_t len : {W + W / 2, 2 * W, 4 * W, 6 * W, 8 * W, 10 * W, static_cast<int64_t>(ids.size())}) {
      if (len > static_cast<int64_t>(ids.size()) || len <= W || len <= prev) continue;
      prev = len;
      std::vector<int32_t> p(ids.begin(), ids.begin() + len);
      runtime::Session e(m), r(m);
      prefill(m, p, runtime::PrefillMode::kExact, chunk, &e);
      prefill(m, p, runtime::PrefillMode::kReplay, chunk, &r);
      const double k0 = kl(e.last_logits(), r.last_logits());
      const bool a0 = argmax(e.last_logits()) == argmax(r.last_logits());
      double ks = 0, kmax = 0;
      int ag = 0;
      for (int s = 0; s < decode; ++s) {
        const int32_t next[1] = {argmax(e.last_logits())};  // forced to the exact run's token
        if (!e.append(next, nullptr).ok() || !r.append(next, nullptr).ok()) return 1;
        const double k = kl(e.last_logits(), r.last_logits());
        ks += k;
        kmax = std::max(kmax, k);
        ag += argmax(e.last_logits()) == argmax(r.last_logits()) ? 1 : 0;
      }
      std::printf("| %lld | %.3g | %s | %.3g | %.3g | %d/%d |\n", static_cast<long long>(len), k0, a0 ? "yes" : "no",
                  decode ? ks / decode : 0.0, kmax, ag, decode);
      kl_sum += k0 + ks;
      agree += ag + (a0 ? 1 : 0);
      steps += decode + 1;
      prompt_agree += a0 ? 1 : 0;
      ++prompts;
    }
    if (steps > 0)
      std::printf("| all | mean KL %.3g | %d/%d prompts | | | %d/%d positions agree |\n", kl_sum / steps, prompt_agree,
                  prompts, agree, steps);
  }

  // ---- long context ---------------------------------------------------------------------------------
  if (long_n > 0) {
    auto mode = runtime::parse_prefill_mode(long_mode);
    if (!mode.ok()) return std::fprintf(stderr, "%s\n", mode.error().to_string().c_str()), 1;
    const auto t = random_tokens(long_n, c.vocab_size, 7);
    runtime::Session s(m);
    const double dt = prefill(m, t, *mode, chunk, &s);
    const auto t0 = clock_type::now();
    const int n_dec = 8;
    for (int i = 0; i < n_dec; ++i) {
      const int32_t next[1] = {argmax(s.last_logits())};
      if (!s.append(next, nullptr).ok()) return 1;
    }
    const double dd = seconds_since(t0);
    const model::KvFootprint fp = model::kv_footprint(c);
    std::printf("\n| prompt tokens | mode | prefill s | prefill tok/s | decode tok/s at this context | cache held | global KV | "
                "rings + state | process peak RSS |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    std::printf("| %lld | %s | %.1f | %.1f | %.2f | %.2f MB | %.2f MB (%.1f B/token) | %.2f MB | %.0f MB |\n",
                static_cast<long long>(long_n), long_mode.c_str(), dt, long_n / dt, n_dec / dd, s.cache().bytes() / 1e6,
                s.cache().global_bytes() / 1e6, static_cast<double>(s.cache().global_bytes()) / static_cast<double>(s.n_past()),
                (fp.window_bytes + fp.state_bytes) / 1e6, peak_rss_mb());
  }
  return 0;
}
