// ThreadPool: a fork-join pool for data-parallel kernels.
//
// parallel_for splits [0, n) into contiguous chunks and runs them on the workers plus the calling
// thread, returning when all are done. One parallel_for at a time per pool (calls from inside a
// running task run inline, serially), so nested use cannot deadlock. Threads spin briefly before
// sleeping, because decode issues thousands of small parallel ops per token.
// Thread safety: parallel_for may be called from one thread at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // n_threads counts the caller: 1 means no worker threads. 0 picks the number of hardware cores.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n); chunks are at least `grain` long.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  // Physical cores of this machine (1 if unknown).
  static int hardware_cores();

 private:
  void worker_loop(int index);
  void run_chunks();

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> active_{0};
  std::atomic<bool> busy_{false};

  // The job being run.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::atomic<int> pending_{0};
};

}  // namespace strata
