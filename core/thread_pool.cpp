#include "core/thread_pool.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace strata {

int ThreadPool::hardware_cores() {
  // Count distinct (physical id, core id) pairs so SMT siblings do not double the count: decode is
  // memory-bound and extra hyperthreads only add contention.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys = "0";
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string val = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "physical id") phys = val;
    if (key == "core id") cores.insert({phys, val});
  }
  int n = static_cast<int>(cores.size());
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(n, 1);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads > 0 ? n_threads : hardware_cores()) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    const int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) break;
    (*fn_)(begin, std::min(begin + chunk_, n_));
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly for the next job (decode runs thousands of small jobs a token), then sleep.
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 200000; ++spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    run_chunks();
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  bool expected = false;
  if (n_threads_ == 1 || n <= grain || !busy_.compare_exchange_strong(expected, true)) {
    fn(0, n);  // serial: one thread, tiny job, or a nested call from inside a task
    return;
  }
  // About 4 chunks per thread balances uneven rows without much scheduling overhead.
  const int64_t target = static_cast<int64_t>(n_threads_) * 4;
  chunk_ = std::max(grain, (n + target - 1) / target);
  fn_ = &fn;
  n_ = n;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  run_chunks();
  while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  fn_ = nullptr;
  busy_.store(false, std::memory_order_release);
}

}  // namespace strata
