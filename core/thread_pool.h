// ThreadPool: a fork-join pool for data-parallel kernels.
//
// parallel_for splits [0, n) into contiguous chunks (guided: each takes 1/(2 T) of what is left, at
// least the grain) and runs them on the workers plus the calling thread, returning as soon as
// every chunk has run — it never waits for a worker that found nothing
// to do, so a worker descheduled by a busy machine cannot stall the caller (the caller then simply
// runs the chunks itself). One job (parallel_for or parallel_for_shares) at a time per pool; a call
// from inside a running task runs inline, serially, so nested use cannot deadlock. Idle workers
// spin briefly (decode issues thousands of small jobs per token) and then sleep.
// Job hand-off is a seqlock: the job fields are written only while no worker is inside a job
// (active_ == 0) and the generation is odd; workers read them only for an even generation they
// re-check after announcing themselves.
// parallel_for_shares is the same pool with another order: each thread walks its own contiguous
// share of [0, n) and only then takes steps from the end of the share with the most left.
// Thread safety: parallel_for and parallel_for_shares may be called from one thread at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace strata {

class ThreadPool {
 public:
  // n_threads counts the caller: 1 means no worker threads. 0 picks the number of physical cores.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n); chunks are at least `grain` long.
  // fn is a FunctionRef (two pointers, no allocation): a lambda passed here lives until the call returns.
  void parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain = 1);

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each at most `step` long (or fn(0, n)
  // where the call runs serially, as parallel_for's: one thread, n <= step, a nested call). Thread k of
  // T (the caller is 0) starts at k n / T and walks forward through its share; a thread whose share
  // is done takes steps from the end of the share with the most indices left, so the call still
  // never waits for a worker that does not wake up. Why: a decode pass streams weight rows laid out
  // in index order, and one thread's consecutive chunks then continue one stream (its prefetches
  // run into the chunk it takes next) where parallel_for's guided chunks alternate between the
  // threads, each chunk a cold start; the small steps leave a short tail. Which thread runs an index
  // and the chunk bounds depend on timing: use it only where fn's results do not depend on them.
  // Requires n < 2^31.
  void parallel_for_shares(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t step = 1);

  // Physical cores of this machine (1 if unknown).
  static int hardware_cores();
  // The largest thread count strata accepts (a typo like -t 1000 is refused, not obeyed).
  static constexpr int kMaxThreads = 256;

 private:
  // A thread's share of a parallel_for_shares call: [lo, hi) packed as lo << 32 | hi, taken from the
  // front by its owner and from the back by the others (one cache line each: no false sharing).
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
  };

  void worker_loop(int index);
  void run_chunks(int index);
  void run_shares(int index);
  bool run_job(int64_t n, const FunctionRef<void(int64_t, int64_t)>& fn, int64_t grain, bool by_shares);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};  // odd while the job fields are being written
  std::atomic<int> active_{0};           // workers inside run_chunks
  std::atomic<bool> busy_{false};        // a job is running (nested calls go inline)

  // The job being run (valid while generation_ is even and unchanged).
  const FunctionRef<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;                // the caller's grain: the smallest chunk, or a share's step
  std::atomic<int64_t> next_{0};     // the first index no thread has taken
  std::atomic<int64_t> done_{0};     // indices whose chunk has run
  bool by_shares_ = false;           // parallel_for_shares: the threads walk shares_
  std::vector<Share> shares_;        // one per thread
};

}  // namespace strata
