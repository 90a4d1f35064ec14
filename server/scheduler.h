// Scheduler: runs generation jobs on one Model with N slots (--parallel), round-robin.
//
// Each slot owns a runtime::Session (token history + KV cache). One worker thread owns the model: on
// each turn it admits queued jobs into free slots, then gives every active slot one step — a prefill
// chunk (ServerOptions::prefill_chunk tokens) or one decode token — so N streams advance together
// and a long prompt does not stall the others. This is interleaving, not batching: a forward still
// runs one sequence at a time (README "strata serve"), so N streams share one stream's throughput.
//
// Prefix reuse, two levels: (1) a new job takes the free slot whose live session history is the
// longest exact prefix of its prompt (a conversation's next turn extends the previous turn's prompt
// + answer: no copy at all); (2) otherwise the slot starts from the longest snapshot in the shared
// runtime::PrefixCache, which holds sessions at prefill chunk boundaries and at the end of every
// request (turn boundaries), within a byte budget. Only the rest of the prompt is prefilled; the
// reused length is the job's cached_tokens. Prefill is exact (every token through every layer) and
// cut at absolute multiples of prefill_chunk, as runtime::Session aligns chunks.
//
// Cancellation: a job whose `cancel` flag is set or whose client_gone() probe returns true is ended
// before its next step (within one decode step, or one prefill chunk), and its slot is free again.
// A queued job whose `cancel` flag is set leaves the queue at the next turn without taking a slot.
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
  int64_t cached_tokens = 0;     // prompt tokens reused from the slot's session
  int64_t completion_tokens = 0;  // sampled tokens, including a final EOS
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
  std::vector<int32_t> scripted;        // TEST ONLY: emit these ids (then EOS) instead of sampling
  bool use_script = false;
  int32_t eos_id = 1;

  std::atomic<bool> cancel{false};      // set by any thread
  std::function<bool()> client_gone;    // optional probe, called on the worker thread before each step

  // Worker-thread callbacks.
  virtual void on_admitted(int64_t cached_tokens) {}
  virtual bool on_token(int32_t id) = 0;  // false: generation ends (JobEnd::kStopped)
  virtual void on_finish(JobEnd end, const Status& status, const JobStats& stats) = 0;  // exactly once
};

struct SchedulerOptions {
  int n_slots = 1;
  int max_queue = 64;
  int64_t ctx = 0;             // per-slot context limit; 0 = max_position_embeddings
  int64_t prefill_chunk = 512;
  uint64_t prefix_cache_bytes = 1ull << 30;  // runtime::PrefixCache budget; 0 = no shared cache
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
  // Forwards that failed in the model (the server reports unhealthy after one).
  int64_t model_failures() const { return failures_.load(); }
  // The shared prefix cache's counters (zeros when disabled).
  runtime::PrefixCacheStats prefix_cache_stats() const;

  // The slot for `prompt` among free slots' histories: the longest history that is a proper prefix
  // of the prompt (ties: least recently used), else the least recently used slot (reused = 0).
  // Returns {slot index, reused tokens}; {-1, 0} if no slot is free.
  struct Pick {
    int slot = -1;
    int64_t reused = 0;
  };
  static Pick select_slot(std::span<const std::vector<int32_t>* const> histories, std::span<const uint64_t> last_used,
                          std::span<const bool> free, std::span<const int32_t> prompt);

 private:
  struct Slot {
    std::unique_ptr<runtime::Session> session;
    std::shared_ptr<Job> job;
    uint64_t last_used = 0;
    // Per-job state.
    int64_t prefill_pos = 0;        // next prompt token to run
    bool decoding = false;
    std::vector<float> logits;
    std::unique_ptr<runtime::Sampler> sampler;
    std::vector<int32_t> generated;
    JobStats stats;
    std::chrono::steady_clock::time_point t_submit, t_start, t_last_token;
  };

  void run();
  void admit_locked();
  void step(Slot& s);
  void finish(Slot& s, JobEnd end, const Status& st);
  int32_t next_token(Slot& s);

  model::Model& m_;
  model::Activations act_;  // the forward scratch of the worker thread
  SchedulerOptions opt_;
  std::unique_ptr<runtime::PrefixCache> prefix_cache_;  // null when disabled
  int64_t ctx_;
  Metrics* metrics_;
  std::vector<Slot> slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Job>, std::chrono::steady_clock::time_point>> queue_;
  bool stop_ = false;
  uint64_t clock_ = 0;
  std::chrono::steady_clock::time_point last_tick_;
  std::atomic<int> running_{0};
  std::atomic<int> sessions_{0};
  std::atomic<int64_t> failures_{0};
  std::thread worker_;
};

}  // namespace strata::server
