#include "tools/bench_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "model/model.h"
#include "runtime/engine.h"

namespace strata::tools {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = static_cast<double>(v.size());
  const auto rank = static_cast<size_t>(std::max(1.0, std::ceil(q * n)));
  return v[std::min(rank, v.size()) - 1];
}

Result<ParallelPoint> run_parallel(model::Model& m, const std::vector<std::vector<int32_t>>& prompts, int64_t gen,
                                   int64_t chunk, int64_t batch_tokens, const std::atomic<bool>* cancel) {
  if (prompts.empty()) return InvalidArgument("bench --parallel: no streams");
  runtime::EngineOptions eo;
  eo.prefill_chunk = chunk;
  eo.batch_tokens = batch_tokens;
  runtime::Engine engine(m, eo);
  std::vector<std::unique_ptr<runtime::Session>> sessions;
  std::vector<double> ttft, stream_tok_s;
  Status failed;
  size_t finished = 0;
  for (const std::vector<int32_t>& p : prompts) {
    sessions.push_back(std::make_unique<runtime::Session>(m));
    runtime::SequenceOptions so;
    so.max_new_tokens = gen;
    so.sampler.temperature = 0;
    so.cancel = cancel;
    runtime::SequenceCallbacks cb;
    cb.on_finish = [&](runtime::FinishReason, const Status& st, const runtime::SequenceStats& ss) {
      ++finished;
      if (!st.ok() && failed.ok()) failed = st;
      ttft.push_back(ss.ttft_s);
      stream_tok_s.push_back(ss.decode_tok_per_s());
    };
    STRATA_RETURN_IF_ERROR(engine.add(sessions.back().get(), p, std::move(so), std::move(cb)).status());
  }
  ParallelPoint r;
  r.streams = static_cast<int>(prompts.size());
  r.prompt = static_cast<int64_t>(prompts.front().size());
  r.gen = gen;
  int64_t decode_tokens = 0;
  double decode_s = 0;
  const auto t0 = clock_type::now();
  while (finished < prompts.size()) {
    const auto s0 = clock_type::now();
    const runtime::StepStats st = engine.step();
    const double dt = seconds(clock_type::now() - s0);  // the forward and the sampling after it
    if (st.entries > 0) ++r.steps;
    if (st.entries > 0 && st.prompt_tokens == 0) {
      decode_tokens += st.decode_entries;
      decode_s += dt;
    }
  }
  STRATA_RETURN_IF_ERROR(failed);
  // A cancel that lands on a token ends its stream with OK (SequenceOptions::cancel): still no point.
  if (cancel != nullptr && cancel->load()) return Cancelled("bench: interrupted");
  r.wall_s = seconds(clock_type::now() - t0);
  r.aggregate_decode_tok_s = decode_s > 0 ? static_cast<double>(decode_tokens) / decode_s : 0;
  r.stream_decode_tok_s = spread_of(stream_tok_s);
  r.ttft_p50_s = quantile(ttft, 0.5);
  r.ttft_p95_s = quantile(ttft, 0.95);
  return r;
}

}  // namespace strata::tools
