// Scheduler: admits generation jobs into the one generation loop (runtime::Engine) on one Model,
// with N slots (--parallel), cancels them and keeps the metrics (issue 14 item 5).
//
// Each slot owns a runtime::Session (token history + KV cache). One worker thread owns the model and
// the engine: between steps it admits queued jobs into free slots (adding a sequence to the engine)
// and drops the ones whose client left; then one engine step runs every active slot in ONE batched
// forward: each decoding slot contributes one token, prefilling slots contribute prompt chunks
// (ServerOptions::prefill_chunk tokens, cut at absolute multiples of it) within the per-step token
// budget (ServerOptions::batch_tokens). Slots join and leave between steps. Sampling, penalties,
// limits and timing are the engine's (runtime/engine.h), written once for every caller.
//
// Prefix reuse (issue 14 item 6): sessions cannot be rewound in place (window ring, compressor
// state), so reuse comes from the longest of (1) a free slot's live session whose history is a
// proper prefix of the prompt (the next turn extends the previous prompt + answer: no copy at all)
// and (2) a snapshot in the shared runtime::PrefixCache, which holds sessions at prefill chunk
// boundaries, at each job's snapshot_at positions (where the last message's rendered assistant
// prefix begins: a client that re-renders the history, dropping reasoning_content, still shares the
// prompt up to there), at the end of each prompt's prefill and at the end of every request (turn
// boundaries), within a byte budget. Only the rest of the prompt is prefilled; the reused length is
// the job's cached_tokens.
//
// Cancellation: a job whose `cancel` flag is set or whose client_gone() probe returns true is ended
// before the next step (the engine's gone probe), and its slot is free again. A queued job whose
// `cancel` flag is set leaves the queue at the next turn without taking a slot.
// Thread safety: submit() and the gauges may be called from any thread; Job callbacks run on the
// worker thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "server/metrics.h"

namespace strata::server {

// How a job ended.
enum class JobEnd {
  kStopped,    // on_token returned false (EOS, stop string, tool block closed)
  kLength,     // max_tokens or the context limit
  kCancelled,  // cancel flag or client gone
  kError,      // a model failure (Status in on_finish)
};

struct JobStats {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens reused (a live session or a prefix-cache snapshot)
  int64_t completion_tokens = 0;  // sampled tokens, including a final EOS
  // Seconds: submit -> admission; the steps that ran this prompt's chunks (shared with the other
  // slots in those steps); first token -> end (runtime::SequenceStats).
  double queue_s = 0, prefill_s = 0, decode_s = 0;
};

// One generation. The handler fills the inputs, overrides the callbacks and submits it.
class Job {
 public:
  virtual ~Job() = default;

  std::vector<int32_t> prompt;          // BOS first; size < context limit
  int64_t max_tokens = 1;               // >= 1, already clipped to the free context
  runtime::SamplerOptions sampler;
  float presence_penalty = 0, frequency_penalty = 0;  // OpenAI penalties over the generated tokens
  std::vector<std::pair<int32_t, float>> logit_bias;  // OpenAI logit_bias (runtime::SequenceOptions)
  int logprobs = -1;                    // -1 = off; else alternatives per token (on_logprob reports)
  std::vector<int32_t> scripted;        // TEST ONLY: emit these ids (then EOS) instead of sampling
  bool use_script = false;
  int32_t eos_id = 1;
  // Constrained decoding (structured output, forced tool calls); null = none. Owned by the job,
  // used by the worker thread only (runtime::SequenceOptions::constraint).
  std::shared_ptr<runtime::TokenConstraint> constraint;
  // Prompt positions worth a prefix-cache snapshot besides chunk boundaries and the prompt's end:
  // where the last message's rendered assistant prefix begins (the chat handler knows it).
  std::vector<int64_t> snapshot_at;

  std::atomic<bool> cancel{false};      // set by any thread
  std::function<bool()> client_gone;    // optional probe, called on the worker thread before each step

  // Worker-thread callbacks.
  virtual void on_admitted(int64_t cached_tokens) {}
  // With logprobs >= 0: each token's report, just before its on_token (runtime/logprobs.h).
  virtual void on_logprob(const runtime::TokenLogprob& report) {}
  virtual bool on_token(int32_t id) = 0;  // false: generation ends (JobEnd::kStopped)
  virtual void on_finish(JobEnd end, const Status& status, const JobStats& stats) = 0;  // exactly once
};

struct SchedulerOptions {
  int n_slots = 1;
  int max_queue = 64;
  int64_t ctx = 0;             // per-slot context limit; 0 = max_position_embeddings
  int64_t prefill_chunk = 512;  // prompt tokens per chunk, cut at absolute multiples (runtime::EngineOptions)
  int64_t batch_tokens = 512;   // tokens per engine step (runtime::EngineOptions::batch_tokens)
  uint64_t prefix_cache_bytes = 1ull << 30;  // runtime::PrefixCache budget; 0 = no shared cache
  int64_t slot_undo = -1;  // undo depth of slot sessions (ServerOptions::slot_undo); -1 = window_size, 0 = none
  runtime::SpecOptions spec;   // speculative decoding of every sequence (runtime/engine.h: while alone)
  // Called on the worker thread between steps, at most every tick_interval_s (and once when idle):
  // where owners of other counters snapshot what only the model thread may read (store stats).
  std::function<void()> tick;
  double tick_interval_s = 0.5;
  [[nodiscard]] Status validate() const;
};

class Scheduler {
 public:
  // Starts the worker thread. `metrics` may be null.
  Scheduler(model::Model& m, const SchedulerOptions& opt, Metrics* metrics);
  ~Scheduler();  // cancels every job (on_finish kCancelled) and joins the worker
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job. kResourceExhausted when max_queue jobs are already waiting; kInvalidArgument for an
  // empty prompt or one that leaves no room in the context.
  [[nodiscard]] Status submit(std::shared_ptr<Job> job);

  int64_t context_limit() const { return ctx_; }
  int running() const { return running_.load(); }
  int waiting() const;
  int sessions() const { return sessions_.load(); }  // slots holding a KV cache
  // Bytes the slots' KV caches hold (model::KvCache::bytes), as of the last engine step.
  uint64_t kv_bytes() const { return kv_bytes_.load(); }
  // Forwards that failed in the model (the server reports unhealthy after one).
  int64_t model_failures() const { return failures_.load(); }
  // The shared prefix cache's counters (zeros when disabled).
  runtime::PrefixCacheStats prefix_cache_stats() const;

  // The slot for `prompt` among free slots' histories (issue 14 item 6, issue 17 item 4): the longest
  // usable common prefix, where a slot's common prefix with the prompt (capped at prompt.size() - 1:
  // one prompt token must still run for logits) is usable when it is the whole history (the prompt
  // extends it) or reaches no lower than the slot's rewind floor (`floors[i]`,
  // Session::rewind_floor: the session is cut back to it), and, while an empty slot is free, keeps at
  // least half of the history (not another conversation cut back to a few template tokens). Ties:
  // least recently used. Without any,
  // an empty slot, else the least recently used one (reused = 0). Returns {slot index, reused
  // tokens, whether the session must be rewound}; {-1, 0} if no slot is free.
  struct Pick {
    int slot = -1;
    int64_t reused = 0;
    bool rewind = false;  // reused < the slot's history: Session::rewind(reused) before use
  };
  static Pick select_slot(std::span<const std::vector<int32_t>* const> histories, std::span<const int64_t> floors,
                          std::span<const uint64_t> last_used,
                          std::span<const bool> free, std::span<const int32_t> prompt);

 private:
  struct Slot {
    std::unique_ptr<runtime::Session> session;
    std::shared_ptr<Job> job;
    uint64_t last_used = 0;
    JobStats stats;  // of the running job
    std::chrono::steady_clock::time_point t_submit, t_last_token;
  };

  void run();
  void admit_locked();
  // Adds slot `i`'s job to the engine (prompt after `reused` tokens); ends it at once on an error.
  void start(size_t i, int64_t reused);
  bool on_token(size_t i, int32_t id);
  void finish(size_t i, JobEnd end, const Status& st, const runtime::SequenceStats& ss);
  void observe(const runtime::StepStats& st);

  model::Model& m_;
  SchedulerOptions opt_;
  runtime::Engine engine_;  // the generation loop; the worker thread's alone
  std::unique_ptr<runtime::PrefixCache> prefix_cache_;  // null when disabled
  int64_t ctx_;
  int64_t undo_depth_ = 0;  // Session::set_undo_depth of every slot session (SchedulerOptions::slot_undo resolved)
  Metrics* metrics_;
  std::vector<Slot> slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Job>, std::chrono::steady_clock::time_point>> queue_;
  std::vector<std::pair<size_t, int64_t>> admitted_;  // (slot, reused) picked under mu_, started after
  bool stop_ = false;
  uint64_t clock_ = 0;
  std::chrono::steady_clock::time_point last_tick_;
  std::atomic<int> running_{0};
  std::atomic<int> sessions_{0};
  std::atomic<uint64_t> kv_bytes_{0};
  std::atomic<int64_t> failures_{0};
  std::thread worker_;
};

}  // namespace strata::server
