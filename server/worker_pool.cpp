#include "server/worker_pool.h"

namespace strata::server {

WorkerPool::WorkerPool(int n_threads) {
  for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { run(); });
}

WorkerPool::~WorkerPool() { join(); }

void WorkerPool::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!closing_) {
      queue_.push_back(std::move(task));
      cv_.notify_one();
      return;
    }
  }
  task();
}

void WorkerPool::join() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void WorkerPool::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace strata::server
