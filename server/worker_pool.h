// WorkerPool: a fixed set of threads that run the handlers of complete requests (parsing,
// rendering, waiting on a generation, writing a stream). Requests reach it only once their head
// and body are read (server/http_transport.h), so a slow or idle client never holds a worker.
// Thread safety: post from any thread; the destructor (or join) runs what was posted, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::server {

class WorkerPool {
 public:
  explicit WorkerPool(int n_threads);
  ~WorkerPool();  // join()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task` (FIFO). The queue is bounded by the caller: one task per open connection at most.
  void post(std::function<void()> task);
  // Runs every queued task to its end, then joins the threads. Idempotent; post() afterwards runs
  // the task on the caller's thread.
  void join();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata::server
