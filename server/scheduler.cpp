#include "server/scheduler.h"

#include <algorithm>

namespace strata::server {

namespace {

// A read error or a shard that changed under the store (issue #3, "Bad input and faults"): only
// the request that hit it fails — its session is discarded at finish() — and the server stays
// healthy, so the next request runs (and fails the same way while the file stays damaged).
// Any other failure of a forward pass is a bug and marks the backend unhealthy.
bool storage_error(const Status& st) {
  return st.code() == StatusCode::kIOError || st.code() == StatusCode::kCorruption;
}

}  // namespace

namespace {

using clock_type = std::chrono::steady_clock;

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Status SchedulerOptions::validate() const {
  if (n_slots < 1 || n_slots > 1024) return InvalidArgument("--parallel: " + std::to_string(n_slots) + " is outside 1..1024");
  if (max_queue < 0) return InvalidArgument("--max-queue: must be >= 0");
  if (ctx < 0) return InvalidArgument("--ctx: must be >= 0");
  if (prefill_chunk < 1) return InvalidArgument("prefill chunk: must be >= 1");
  return Status();
}

Scheduler::Scheduler(model::Model& m, const SchedulerOptions& opt, Metrics* metrics)
    : m_(m), act_(m.new_activations()), opt_(opt), metrics_(metrics), slots_(static_cast<size_t>(std::max(1, opt.n_slots))) {
  const int64_t max_pos = m.config().max_position_embeddings;
  ctx_ = opt.ctx > 0 ? std::min(opt.ctx, max_pos) : max_pos;
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
                                       std::span<const uint64_t> last_used, std::span<const bool> free,
                                       std::span<const int32_t> prompt) {
  Pick best;
  uint64_t best_used = 0;
  for (size_t i = 0; i < histories.size(); ++i) {
    if (!free[i] || !histories[i]) continue;
    const std::vector<int32_t>& h = *histories[i];
    // A usable history is a proper prefix: at least one prompt token must still run for logits.
    if (h.empty() || h.size() >= prompt.size() || !std::equal(h.begin(), h.end(), prompt.begin())) continue;
    const auto n = static_cast<int64_t>(h.size());
    if (n > best.reused || (n == best.reused && last_used[i] < best_used)) {
      best = Pick{static_cast<int>(i), n};
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
    std::vector<uint64_t> used(slots_.size(), 0);
    std::unique_ptr<bool[]> free(new bool[slots_.size()]);
    bool any_free = false;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      free[i] = s.job == nullptr;
      any_free = any_free || free[i];
      if (s.session && s.session->valid()) hist[i] = &s.session->tokens();
      used[i] = s.last_used;
    }
    if (!any_free) return;
    auto [job, t_submit] = std::move(queue_.front());
    queue_.pop_front();
    Pick pick = select_slot(hist, used, std::span<const bool>(free.get(), slots_.size()), job->prompt);
    Slot& s = slots_[static_cast<size_t>(pick.slot)];
    if (pick.reused == 0 && (!s.session || s.session->n_past() > 0 || !s.session->valid())) {
      if (!s.session) sessions_.fetch_add(1);
      s.session = std::make_unique<runtime::Session>(m_);
    }
    s.logits.assign(static_cast<size_t>(m_.config().vocab_size), 0.0f);
    s.decoding = false;
    // No live session extends to this prompt: the longest snapshot of the shared cache, if any.
    if (pick.reused == 0 && prefix_cache_)
      pick.reused = prefix_cache_->restore(job->prompt, runtime::PrefillMode::kExact, s.session.get());
    if (pick.reused == static_cast<int64_t>(job->prompt.size())) {
      // The snapshot covers the whole prompt and holds its last logits: decode at once.
      const auto ll = s.session->last_logits();
      std::copy(ll.begin(), ll.end(), s.logits.begin());
      s.decoding = true;
    }
    s.job = std::move(job);
    s.prefill_pos = pick.reused;
    s.sampler = std::make_unique<runtime::Sampler>(s.job->sampler);
    s.generated.clear();
    s.stats = JobStats{};
    s.stats.prompt_tokens = static_cast<int64_t>(s.job->prompt.size());
    s.stats.cached_tokens = pick.reused;
    s.t_submit = t_submit;
    s.t_start = clock_type::now();
    s.stats.queue_s = seconds(s.t_start - t_submit);
    running_.fetch_add(1);
    if (metrics_) {
      metrics_->prompt_tokens += static_cast<uint64_t>(s.stats.prompt_tokens);
      metrics_->prompt_tokens_cached += static_cast<uint64_t>(pick.reused);
    }
    s.job->on_admitted(pick.reused);
  }
}

void Scheduler::run() {
  last_tick_ = clock_type::now();
  std::vector<std::shared_ptr<Job>> dropped;
  for (;;) {
    bool active = false;
    for (const Slot& s : slots_) active = active || s.job != nullptr;
    {
      std::unique_lock<std::mutex> l(mu_);
      if (!active && !stop_ && queue_.empty()) {
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
    }
    for (std::shared_ptr<Job>& job : dropped)
      job->on_finish(JobEnd::kCancelled, Cancelled("the client went away while queued"), JobStats{});
    dropped.clear();
    for (Slot& s : slots_)
      if (s.job) step(s);
    if (opt_.tick && seconds(clock_type::now() - last_tick_) >= opt_.tick_interval_s) {
      opt_.tick();
      last_tick_ = clock_type::now();
    }
  }
  // Shutdown: every job ends as cancelled.
  for (Slot& s : slots_)
    if (s.job) finish(s, JobEnd::kCancelled, Cancelled("the server is shutting down"));
  std::deque<std::pair<std::shared_ptr<Job>, clock_type::time_point>> rest;
  {
    std::lock_guard<std::mutex> l(mu_);
    rest.swap(queue_);
  }
  for (auto& [job, t] : rest) job->on_finish(JobEnd::kCancelled, Cancelled("the server is shutting down"), JobStats{});
}

int32_t Scheduler::next_token(Slot& s) {
  Job& j = *s.job;
  if (j.use_script) {
    const size_t i = s.generated.size();
    return i < j.scripted.size() ? j.scripted[i] : j.eos_id;
  }
  if (j.presence_penalty == 0 && j.frequency_penalty == 0) return s.sampler->sample(s.logits);
  // OpenAI penalties: logit -= frequency * count + presence * (count > 0), over generated tokens.
  std::vector<std::pair<int32_t, int>> counts;
  std::vector<int32_t> sorted = s.generated;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size();) {
    size_t k = i;
    while (k < sorted.size() && sorted[k] == sorted[i]) ++k;
    counts.emplace_back(sorted[i], static_cast<int>(k - i));
    i = k;
  }
  std::vector<float> adjusted = s.logits;
  for (const auto& [tok, n] : counts)
    if (tok >= 0 && static_cast<size_t>(tok) < adjusted.size())
      adjusted[static_cast<size_t>(tok)] -= j.frequency_penalty * static_cast<float>(n) + j.presence_penalty;
  return s.sampler->sample(adjusted);
}

void Scheduler::step(Slot& s) {
  Job& j = *s.job;
  if (j.cancel.load() || (j.client_gone && j.client_gone())) {
    finish(s, JobEnd::kCancelled, Cancelled("the client went away"));
    return;
  }
  runtime::Session& ses = *s.session;
  if (!s.decoding) {
    // One chunk per turn, ending at the next absolute multiple of prefill_chunk (where Session cuts
    // chunks too, so the prefix cache's chunk-boundary snapshots resume exactly).
    const auto total = static_cast<int64_t>(j.prompt.size());
    const int64_t to_boundary = opt_.prefill_chunk - ses.n_past() % opt_.prefill_chunk;
    const int64_t n = std::min(to_boundary, total - s.prefill_pos);
    const bool last = s.prefill_pos + n == total;
    runtime::AppendOptions ao;
    ao.chunk = opt_.prefill_chunk;
    ao.mode = runtime::PrefillMode::kExact;
    ao.activations = &act_;
    const auto t0 = clock_type::now();
    const Status st = ses.append(std::span<const int32_t>(j.prompt).subspan(static_cast<size_t>(s.prefill_pos),
                                                                            static_cast<size_t>(n)),
                                 ao, last ? s.logits.data() : nullptr);
    const auto dt = clock_type::now() - t0;
    s.stats.prefill_s += seconds(dt);
    if (metrics_) metrics_->prefill_ns += static_cast<uint64_t>(std::chrono::nanoseconds(dt).count());
    if (!st.ok()) {
      if (!ses.valid() && !storage_error(st)) failures_.fetch_add(1);
      finish(s, JobEnd::kError, st);
      return;
    }
    s.prefill_pos += n;
    if (!last) {
      if (prefix_cache_ && ses.n_past() % opt_.prefill_chunk == 0) prefix_cache_->insert(ses);
      return;  // the other slots run before the next chunk
    }
    s.decoding = true;
  }
  const int32_t tok = next_token(s);
  s.generated.push_back(tok);
  ++s.stats.completion_tokens;
  const auto now = clock_type::now();
  if (metrics_) {
    ++metrics_->generation_tokens;
    if (s.generated.size() == 1) {
      metrics_->time_to_first_token.observe(seconds(now - s.t_submit));
    } else {
      metrics_->inter_token_latency.observe(seconds(now - s.t_last_token));
    }
  }
  s.t_last_token = now;
  if (!j.on_token(tok)) {
    finish(s, JobEnd::kStopped, Status());
    return;
  }
  if (s.stats.completion_tokens >= j.max_tokens || ses.n_past() + 1 > ctx_) {
    finish(s, JobEnd::kLength, Status());
    return;
  }
  const int32_t one[1] = {tok};
  runtime::AppendOptions ao;
  ao.chunk = 1;
  ao.activations = &act_;
  ao.kind = model::RowKind::kDecode;
  const auto t0 = clock_type::now();
  const Status st = ses.append(one, ao, s.logits.data());
  const auto dt = clock_type::now() - t0;
  s.stats.decode_s += seconds(dt);
  if (metrics_) {
    metrics_->decode_ns += static_cast<uint64_t>(std::chrono::nanoseconds(dt).count());
    ++metrics_->decode_forwards;
  }
  if (!st.ok()) {
    if (!ses.valid() && !storage_error(st)) failures_.fetch_add(1);
    finish(s, JobEnd::kError, st);
  }
}

void Scheduler::finish(Slot& s, JobEnd end, const Status& st) {
  std::shared_ptr<Job> job = std::move(s.job);
  s.job.reset();
  s.sampler.reset();
  s.generated.clear();
  s.decoding = false;
  s.last_used = ++clock_;
  if (s.session && !s.session->valid()) {
    s.session.reset();
    sessions_.fetch_sub(1);
  } else if (s.session && prefix_cache_ && s.session->n_past() > 0) {
    prefix_cache_->insert(*s.session);  // a turn boundary: the next turn may land in another slot
  }
  running_.fetch_sub(1);
  if (metrics_) metrics_->request_duration.observe(seconds(clock_type::now() - s.t_submit));
  job->on_finish(end, st, s.stats);
}

}  // namespace strata::server
