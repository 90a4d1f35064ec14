#include "server/scheduler.h"

#include <algorithm>

namespace strata::server {

namespace {

runtime::EngineOptions engine_options(const SchedulerOptions& o) {
  runtime::EngineOptions e;
  e.prefill_chunk = o.prefill_chunk;
  e.batch_tokens = o.batch_tokens;
  e.max_context = o.ctx;
  return e;
}

JobEnd job_end(runtime::FinishReason r) {
  switch (r) {
    case runtime::FinishReason::kStopId:
    case runtime::FinishReason::kStopped:
      return JobEnd::kStopped;
    case runtime::FinishReason::kLength:
    case runtime::FinishReason::kContext:
      return JobEnd::kLength;
    case runtime::FinishReason::kCancelled:
      return JobEnd::kCancelled;
    case runtime::FinishReason::kError:
      break;
  }
  return JobEnd::kError;
}

using clock_type = std::chrono::steady_clock;

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Status SchedulerOptions::validate() const {
  if (n_slots < 1 || n_slots > 1024) return InvalidArgument("--parallel: " + std::to_string(n_slots) + " is outside 1..1024");
  if (max_queue < 0) return InvalidArgument("--max-queue: must be >= 0");
  if (ctx < 0) return InvalidArgument("--ctx: must be >= 0");
  if (prefill_chunk < 1) return InvalidArgument("prefill chunk: must be >= 1");
  if (slot_undo < -1) return InvalidArgument("--slot-undo: must be >= 0, or -1 for the model's window_size");
  if (batch_tokens < 1) return InvalidArgument("--batch-tokens: must be >= 1");
  return Status();
}

Scheduler::Scheduler(model::Model& m, const SchedulerOptions& opt, Metrics* metrics)
    : m_(m),
      opt_(opt),
      engine_(m, engine_options(opt)),
      metrics_(metrics),
      slots_(static_cast<size_t>(std::max(1, opt.n_slots))) {
  ctx_ = engine_.context_limit();
  undo_depth_ = opt.slot_undo < 0 ? m.config().window_size : opt.slot_undo;
  if (opt.prefix_cache_bytes > 0) {
    runtime::PrefixCacheOptions po;
    po.budget_bytes = opt.prefix_cache_bytes;
    prefix_cache_ = std::make_unique<runtime::PrefixCache>(po);
  }
  worker_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

runtime::PrefixCacheStats Scheduler::prefix_cache_stats() const {
  return prefix_cache_ ? prefix_cache_->stats() : runtime::PrefixCacheStats{};
}

int Scheduler::waiting() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(queue_.size());
}

Status Scheduler::submit(std::shared_ptr<Job> job) {
  if (job->prompt.empty()) return InvalidArgument("empty prompt");
  if (static_cast<int64_t>(job->prompt.size()) >= ctx_)
    return InvalidArgument("prompt of " + std::to_string(job->prompt.size()) + " tokens leaves no room in the context of " +
                           std::to_string(ctx_) + " tokens");
  if (job->max_tokens < 1) return InvalidArgument("max_tokens must be >= 1");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return ResourceExhausted("the server is shutting down");
    // A free slot admits at once; otherwise the job waits, up to max_queue of them.
    const int free_slots = static_cast<int>(slots_.size()) - running_.load();
    if (static_cast<int>(queue_.size()) >= opt_.max_queue + std::max(0, free_slots))
      return ResourceExhausted("the server is at capacity: " + std::to_string(queue_.size()) +
                               " requests waiting (--max-queue " + std::to_string(opt_.max_queue) + ")");
    queue_.emplace_back(std::move(job), clock_type::now());
  }
  cv_.notify_one();
  return Status();
}

Scheduler::Pick Scheduler::select_slot(std::span<const std::vector<int32_t>* const> histories,
                                       std::span<const int64_t> floors, std::span<const uint64_t> last_used,
                                       std::span<const bool> free, std::span<const int32_t> prompt) {
  Pick best;
  uint64_t best_used = 0;
  bool empty_slot = false;
  for (size_t i = 0; i < histories.size(); ++i) empty_slot = empty_slot || (free[i] && (!histories[i] || histories[i]->empty()));
  for (size_t i = 0; i < histories.size(); ++i) {
    if (!free[i] || !histories[i]) continue;
    const std::vector<int32_t>& h = *histories[i];
    const size_t cap = std::min(h.size(), prompt.size() - 1);
    const auto lcp = static_cast<int64_t>(std::mismatch(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(cap),
                                                        prompt.begin()).first - h.begin());
    const bool extend = lcp == static_cast<int64_t>(h.size());
    if (lcp == 0 || (!extend && lcp < floors[i])) continue;  // past the floor: the overwritten ring rows are gone
    // A rewind keeping less than half of a slot's history would cut another conversation's live
    // session for a few shared tokens (the chat template's opening ones): while an empty slot is
    // free it takes that instead (llama.cpp's server likewise wants a prompt similarity of 0.5).
    if (!extend && empty_slot && 2 * lcp < static_cast<int64_t>(h.size())) continue;
    if (lcp > best.reused || (lcp == best.reused && last_used[i] < best_used)) {
      best = Pick{static_cast<int>(i), lcp, !extend};
      best_used = last_used[i];
    }
  }
  if (best.slot >= 0) return best;
  // No reuse: an empty slot first, else the least recently used one.
  for (size_t i = 0; i < histories.size(); ++i)
    if (free[i] && (!histories[i] || histories[i]->empty())) return Pick{static_cast<int>(i), 0};
  for (size_t i = 0; i < histories.size(); ++i)
    if (free[i] && (best.slot < 0 || last_used[i] < best_used)) {
      best = Pick{static_cast<int>(i), 0};
      best_used = last_used[i];
    }
  return best;
}

void Scheduler::admit_locked() {
  while (!queue_.empty()) {
    std::vector<const std::vector<int32_t>*> hist(slots_.size(), nullptr);
    std::vector<int64_t> floors(slots_.size(), 0);
    std::vector<uint64_t> used(slots_.size(), 0);
    std::unique_ptr<bool[]> free(new bool[slots_.size()]);
    bool any_free = false;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      free[i] = s.job == nullptr;
      any_free = any_free || free[i];
      if (s.session && s.session->valid()) {
        hist[i] = &s.session->tokens();
        floors[i] = s.session->rewind_floor();
      }
      used[i] = s.last_used;
    }
    if (!any_free) return;
    auto [job, t_submit] = std::move(queue_.front());
    queue_.pop_front();
    Pick pick = select_slot(hist, floors, used, std::span<const bool>(free.get(), slots_.size()), job->prompt);
    Slot& s = slots_[static_cast<size_t>(pick.slot)];
    if (!s.session) {
      sessions_.fetch_add(1);
      s.session = std::make_unique<runtime::Session>(m_);
    }
    // The longest reusable prefix: the slot's live session (extended, or rewound to the common
    // prefix when the client changed the tail: a regenerated answer, an edited last message), or a
    // longer snapshot of the shared cache (one taken where the last message's assistant prefix began
    // survives a client re-rendering the history; issue 14 item 6), which then replaces the session.
    bool restored = false;
    if (prefix_cache_) {
      const int64_t got = prefix_cache_->restore(job->prompt, runtime::PrefillMode::kExact, s.session.get(), pick.reused);
      if (got > pick.reused) {
        pick.reused = got;
        restored = true;
      }
    }
    if (!restored && pick.rewind) {
      // Bit-exact (Session::rewind): what follows computes what a session prefilled to `reused` would.
      if (s.session->rewind(pick.reused).ok()) {
        if (metrics_) ++metrics_->prefix_rewinds;
      } else {
        pick.reused = 0;  // not expected (the floor was checked); a fresh session is always right
      }
    }
    if (pick.reused == 0 && (s.session->n_past() > 0 || !s.session->valid())) s.session = std::make_unique<runtime::Session>(m_);
    // Snapshots and fresh sessions carry no undo records: from here on the slot records its tail.
    s.session->set_undo_depth(undo_depth_);
    s.job = std::move(job);
    s.stats = JobStats{};
    s.stats.prompt_tokens = static_cast<int64_t>(s.job->prompt.size());
    s.stats.cached_tokens = pick.reused;
    s.t_submit = t_submit;
    s.stats.queue_s = seconds(clock_type::now() - t_submit);
    running_.fetch_add(1);
    if (metrics_) {
      metrics_->prompt_tokens += static_cast<uint64_t>(s.stats.prompt_tokens);
      metrics_->prompt_tokens_cached += static_cast<uint64_t>(pick.reused);
    }
    admitted_.emplace_back(static_cast<size_t>(pick.slot), pick.reused);
  }
}

void Scheduler::start(size_t i, int64_t reused) {
  Slot& s = slots_[i];
  Job& j = *s.job;
  j.on_admitted(reused);
  runtime::SequenceOptions so;
  so.max_new_tokens = j.max_tokens;
  so.sampler = j.sampler;
  so.presence_penalty = j.presence_penalty;
  so.frequency_penalty = j.frequency_penalty;
  so.logit_bias = j.logit_bias;
  so.logprobs = j.logprobs;
  so.use_script = j.use_script;
  so.scripted = j.scripted;
  so.script_end_id = j.eos_id;
  so.constraint = j.constraint;
  so.spec = opt_.spec;
  for (int64_t at : j.snapshot_at)
    if (at > reused && at < static_cast<int64_t>(j.prompt.size())) so.snapshot_at.push_back(at);
  runtime::SequenceCallbacks cb;
  cb.on_token = [this, i](int32_t id) { return on_token(i, id); };
  if (j.logprobs >= 0) cb.on_logprob = [job = s.job.get()](const runtime::TokenLogprob& r) { job->on_logprob(r); };
  cb.gone = [job = s.job.get()] { return job->cancel.load() || (job->client_gone && job->client_gone()); };
  if (prefix_cache_) cb.on_snapshot = [pc = prefix_cache_.get()](const runtime::Session& x) { pc->insert(x); };
  cb.on_finish = [this, i](runtime::FinishReason r, const Status& st, const runtime::SequenceStats& ss) {
    finish(i, job_end(r), st, ss);
  };
  std::vector<int32_t> rest(j.prompt.begin() + static_cast<std::ptrdiff_t>(reused), j.prompt.end());
  auto id = engine_.add(s.session.get(), std::move(rest), std::move(so), std::move(cb));
  if (!id.ok()) finish(i, JobEnd::kError, id.error(), runtime::SequenceStats{});
}

void Scheduler::observe(const runtime::StepStats& st) {
  if (st.entries == 0) return;
  // A read error or a shard that changed under the store (issue #3, "Bad input and faults"): only
  // the requests of that batch fail (their sessions are discarded at finish()) and the server stays
  // healthy, so the next request runs (and fails the same way while the file stays damaged). Any
  // other failure of a forward pass is a bug and marks the backend unhealthy.
  if (!st.status.ok() && st.status.code() != StatusCode::kIOError && st.status.code() != StatusCode::kCorruption)
    failures_.fetch_add(1);
  if (!metrics_) return;
  metrics_->batch_size.observe(static_cast<double>(st.entries));
  metrics_->step_tokens.observe(static_cast<double>(st.tokens));
  ++metrics_->steps;
  // A mixed step's time is split between prefill and decode by their share of its tokens.
  const double ns = st.forward_s * 1e9;
  const double prompt_share = st.tokens > 0 ? static_cast<double>(st.prompt_tokens) / static_cast<double>(st.tokens) : 0;
  metrics_->prefill_ns += static_cast<uint64_t>(ns * prompt_share);
  metrics_->decode_ns += static_cast<uint64_t>(ns * (1 - prompt_share));
  if (st.decode_entries > 0) {
    ++metrics_->decode_forwards;
    metrics_->decode_tokens += static_cast<uint64_t>(st.decode_entries);
  }
}

void Scheduler::run() {
  last_tick_ = clock_type::now();
  std::vector<std::shared_ptr<Job>> dropped;
  std::vector<std::pair<size_t, int64_t>> admitted;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (engine_.idle() && !stop_ && queue_.empty()) {
        if (opt_.tick) {
          l.unlock();
          opt_.tick();
          last_tick_ = clock_type::now();
          l.lock();
        }
        cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      }
      if (stop_) break;
      // Jobs whose client left while they waited end here, without taking a slot (a slot's live
      // session is worth more than a job nobody reads) and without holding a queue place.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->first->cancel.load()) {
          dropped.push_back(std::move(it->first));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      admit_locked();
      admitted.swap(admitted_);
    }
    for (std::shared_ptr<Job>& job : dropped)
      job->on_finish(JobEnd::kCancelled, Cancelled("the client went away while queued"), JobStats{});
    dropped.clear();
    for (const auto& [slot, reused] : admitted) start(slot, reused);
    admitted.clear();
    // One batched forward over every active slot; slots join and leave between steps.
    if (!engine_.idle()) {
      observe(engine_.step());
      // Slots' sessions change on this thread only (admission, finish): summed here, read anywhere.
      uint64_t kv = 0;
      for (const Slot& slot : slots_)
        if (slot.session) kv += slot.session->cache().bytes();
      kv_bytes_.store(kv);
    }
    if (opt_.tick && seconds(clock_type::now() - last_tick_) >= opt_.tick_interval_s) {
      opt_.tick();
      last_tick_ = clock_type::now();
    }
  }
  // Shutdown: every job ends as cancelled.
  engine_.cancel_all(Cancelled("the server is shutting down"));
  std::deque<std::pair<std::shared_ptr<Job>, clock_type::time_point>> rest;
  {
    std::lock_guard<std::mutex> l(mu_);
    rest.swap(queue_);
    for (const auto& [slot, reused] : admitted_) rest.emplace_back(std::move(slots_[slot].job), clock_type::now());
    admitted_.clear();
  }
  for (auto& [job, t] : rest)
    if (job) job->on_finish(JobEnd::kCancelled, Cancelled("the server is shutting down"), JobStats{});
}

bool Scheduler::on_token(size_t i, int32_t id) {
  Slot& s = slots_[i];
  ++s.stats.completion_tokens;
  const auto now = clock_type::now();
  if (metrics_) {
    ++metrics_->generation_tokens;
    if (s.stats.completion_tokens == 1) {
      metrics_->time_to_first_token.observe(seconds(now - s.t_submit));
    } else {
      metrics_->inter_token_latency.observe(seconds(now - s.t_last_token));
    }
  }
  s.t_last_token = now;
  return s.job->on_token(id);
}

void Scheduler::finish(size_t i, JobEnd end, const Status& st, const runtime::SequenceStats& ss) {
  Slot& s = slots_[i];
  std::shared_ptr<Job> job = std::move(s.job);
  s.job.reset();
  s.stats.prefill_s = ss.prefill_s;
  s.stats.decode_s = ss.decode_s;
  s.last_used = ++clock_;
  if (s.session && !s.session->valid()) {
    s.session.reset();
    sessions_.fetch_sub(1);
  } else if (s.session && prefix_cache_ && s.session->n_past() > 0) {
    prefix_cache_->insert(*s.session);  // a turn boundary: the next turn may land in another slot
  }
  running_.fetch_sub(1);
  if (metrics_) {
    metrics_->request_duration.observe(seconds(clock_type::now() - s.t_submit));
    metrics_->spec_cycles += static_cast<uint64_t>(ss.spec.cycles);
    metrics_->spec_drafted += static_cast<uint64_t>(ss.spec.drafted);
    metrics_->spec_accepted += static_cast<uint64_t>(ss.spec.accepted);
    metrics_->spec_guard_pauses += static_cast<uint64_t>(ss.spec.pauses);
  }
  job->on_finish(end, st, s.stats);
}

}  // namespace strata::server
