#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "core/status.h"

namespace strata {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
// How long an idle worker waits for the next job before it sleeps: longer than the serial stretches
// between the pool passes of a decode step (routing, quantising a row, a batch's per-entry attention
// work), so the worker does not sleep and pay a futex wake-up per pass. The first kPureSpin it only
// PAUSEs; after that it yields the core on every turn, so where threads outnumber cores (a draft
// model's pool beside the target's, -t above the core count, MPI ranks sharing a host) the thread
// that has work runs instead. Timed, not counted: a PAUSE takes 9.5 ns on this Sapphire Rapids VM
// and a different time elsewhere. 2000 PAUSEs (19 us here) let the worker sleep in the serial
// stretches of an 8-row demo step (2.7% of the step spent waking it); 20000 (190 us): MoE 8.8 ->
// 8.0 ms per step, one row 105 -> 112-122 tok/s (bench/batch_bench, demo, 2 threads). Without the
// yield, 4 threads on 2 cores ran a pass of 128 us of work 45% slower than with the old spin.
constexpr auto kPureSpin = std::chrono::microseconds(20);
constexpr auto kSpin = std::chrono::microseconds(300);
}  // namespace

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
  return std::clamp(n, 1, kMaxThreads);
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::clamp(n_threads > 0 ? n_threads : hardware_cores(), 1, kMaxThreads)),
      shares_(static_cast<size_t>(n_threads_)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(2);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(int index) {
  if (by_shares_) {
    run_shares(index);
    return;
  }
  // Guided self-scheduling: each grab takes 1/(2 T) of what is left, at least chunk_ (the caller's
  // grain), so the first chunks are large (few hand-offs) and the last ones small: a thread that
  // finishes early waits for at most one small chunk. The bounds depend only on n, T and the grain
  // (each grab starts where the previous ended), never on which thread grabs.
  const int64_t divisor = 2 * static_cast<int64_t>(n_threads_);
  int64_t begin = next_.load(std::memory_order_relaxed);
  while (begin < n_) {
    const int64_t end = std::min(n_, begin + std::max(chunk_, (n_ - begin + divisor - 1) / divisor));
    if (!next_.compare_exchange_weak(begin, end, std::memory_order_relaxed)) continue;  // begin reloaded
    (*fn_)(begin, end);
    done_.fetch_add(end - begin);
    begin = next_.load(std::memory_order_relaxed);
  }
}

namespace {
constexpr uint64_t pack_range(int64_t lo, int64_t hi) {
  return static_cast<uint64_t>(lo) << 32 | static_cast<uint64_t>(hi);
}
constexpr int64_t range_lo(uint64_t r) { return static_cast<int64_t>(r >> 32); }
constexpr int64_t range_hi(uint64_t r) { return static_cast<int64_t>(r & 0xffffffffu); }
}  // namespace

void ThreadPool::run_shares(int index) {
  const int64_t step = chunk_;
  // Own share first, front to back: one stream.
  std::atomic<uint64_t>& own = shares_[static_cast<size_t>(index)].range;
  uint64_t r = own.load(std::memory_order_relaxed);
  while (range_lo(r) < range_hi(r)) {
    const int64_t lo = range_lo(r), hi = range_hi(r), end = std::min(hi, lo + step);
    if (!own.compare_exchange_weak(r, pack_range(end, hi), std::memory_order_relaxed)) continue;  // r reloaded
    (*fn_)(lo, end);
    done_.fetch_add(end - lo);
    r = own.load(std::memory_order_relaxed);
  }
  // Then steps from the back of whichever share has the most left.
  for (;;) {
    int victim = -1;
    int64_t most = 0;
    for (int k = 0; k < n_threads_; ++k) {
      const uint64_t v = shares_[static_cast<size_t>(k)].range.load(std::memory_order_relaxed);
      const int64_t left = range_hi(v) - range_lo(v);
      if (left > most) {
        most = left;
        victim = k;
      }
    }
    if (victim < 0) return;
    std::atomic<uint64_t>& other = shares_[static_cast<size_t>(victim)].range;
    uint64_t v = other.load(std::memory_order_relaxed);
    while (range_lo(v) < range_hi(v)) {
      const int64_t lo = range_lo(v), hi = range_hi(v), begin = std::max(lo, hi - step);
      if (!other.compare_exchange_weak(v, pack_range(lo, begin), std::memory_order_relaxed)) continue;
      (*fn_)(begin, hi);
      done_.fetch_add(hi - begin);
      break;
    }
  }
}

void ThreadPool::worker_loop(int index) {
  // The generation when the pool was made (no job yet): a worker that starts after the first job
  // was published still runs it.
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load();
    const auto start = std::chrono::steady_clock::now();
    bool yielding = false;
    for (int spin = 1; g == seen || (g & 1); ++spin) {
      if (yielding) std::this_thread::yield();
      else cpu_relax();
      g = generation_.load();
      if (yielding || spin % 64 == 0) {
        const auto waited = std::chrono::steady_clock::now() - start;
        if (waited >= kSpin) break;
        yielding = waited >= kPureSpin;
      }
    }
    if (g == seen || (g & 1)) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        const uint64_t now = generation_.load();
        return (now != seen && !(now & 1)) || stop_.load();
      });
      g = generation_.load();
    }
    if (stop_.load()) return;
    if (g & 1) continue;
    // Announce, then confirm the job did not change meanwhile (seqlock read side).
    active_.fetch_add(1);
    if (generation_.load() != g) {
      active_.fetch_sub(1);
      continue;
    }
    seen = g;
    run_chunks(index);
    active_.fetch_sub(1);
  }
}

// Publishes a job, runs the caller's part and waits for the chunks other threads took; false
// where the call runs serially instead (one thread, a job of one chunk, a nested call from a task).
bool ThreadPool::run_job(int64_t n, const FunctionRef<void(int64_t, int64_t)>& fn, int64_t grain, bool by_shares) {
  bool expected = false;
  if (n_threads_ == 1 || n <= grain || !busy_.compare_exchange_strong(expected, true)) return false;
  // Write side of the seqlock: odd generation, wait for workers still leaving the last job.
  generation_.fetch_add(1);
  while (active_.load() != 0) cpu_relax();
  chunk_ = grain;  // the smallest chunk (run_chunks: guided sizes), or the step of a share
  fn_ = &fn;
  n_ = n;
  by_shares_ = by_shares;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  if (by_shares) {
    for (int k = 0; k < n_threads_; ++k)
      shares_[static_cast<size_t>(k)].range.store(pack_range(n * k / n_threads_, n * (k + 1) / n_threads_),
                                                      std::memory_order_relaxed);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1);  // even: published
  }
  cv_.notify_all();
  run_chunks(0);
  // Wait for chunks other threads took, not for workers that never woke up.
  while (done_.load() != n) cpu_relax();
  busy_.store(false);
  return true;
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (!run_job(n, fn, grain, false)) fn(0, n);
}

void ThreadPool::parallel_for_shares(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t step) {
  if (n <= 0) return;
  step = std::max<int64_t>(step, 1);
  STRATA_CHECK(n < (int64_t{1} << 31), "parallel_for_shares: n must be below 2^31");
  if (!run_job(n, fn, step, true)) fn(0, n);
}

}  // namespace strata
