#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace strata {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 64, 1000, 4097}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n;
    }
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.parallel_for(8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(10, [&](int64_t bb, int64_t ee) { total.fetch_add(ee - bb); });
  });
  EXPECT_EQ(total.load(), 80);
}

TEST(ThreadPool, ManySmallJobs) {
  ThreadPool pool(2);
  int64_t sum = 0;
  std::vector<int64_t> part(2, 0);
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int64_t> s{0};
    pool.parallel_for(16, [&](int64_t b, int64_t e) { s.fetch_add(e - b); });
    sum += s.load();
  }
  EXPECT_EQ(sum, 2000 * 16);
}

TEST(ThreadPoolShares, CoversRangeExactlyOnceInSteps) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4097}) {
      for (int64_t step : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int64_t> longest{0};
        pool.parallel_for_shares(
            n,
            [&](int64_t b, int64_t e) {
              ASSERT_LT(b, e);
              int64_t len = e - b, seen = longest.load();
              while (len > seen && !longest.compare_exchange_weak(seen, len)) {}
              for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
            },
            step);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " step=" << step << " i=" << i;
        // A serial call (one thread, or n <= step) is one chunk; otherwise no chunk exceeds the step.
        if (threads > 1 && n > step) EXPECT_LE(longest.load(), step) << "threads=" << threads << " n=" << n;
      }
    }
  }
}

// The caller owns share 0: it starts at index 0 and walks forward from there, one step after the
// other, until its share is done or another thread took the rest of it from the back.
TEST(ThreadPoolShares, CallerWalksItsShareFromTheFront) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  int walked = 0;  // reps where the caller ran any chunk (a descheduled caller may find none left)
  for (int rep = 0; rep < 200; ++rep) {
    const int64_t n = 64, step = 4;
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> mine;
    pool.parallel_for_shares(
        n,
        [&](int64_t b, int64_t e) {
          if (std::this_thread::get_id() != caller) return;
          std::lock_guard<std::mutex> lock(mu);
          mine.emplace_back(b, e);
        },
        step);
    if (mine.empty()) continue;
    ++walked;
    int64_t expect = 0;
    for (const auto& [b, e] : mine) {
      if (b >= n / 2) break;  // then steps stolen from the other share
      EXPECT_EQ(b, expect) << "rep " << rep;
      expect = e;
    }
  }
  EXPECT_GT(walked, 0);
}

// A thread stuck in a chunk of its share does not hold up the rest of that share: the other
// thread takes it from the back. The caller's first chunk waits until every other index is done,
// which only happens if the worker steals the caller's remaining steps.
TEST(ThreadPoolShares, OthersStealWhatAStuckThreadHasLeft) {
  ThreadPool pool(2);
  const int64_t n = 40, step = 2;
  std::atomic<int64_t> done{0};
  std::atomic<bool> stole{true};
  pool.parallel_for_shares(
      n,
      [&](int64_t b, int64_t e) {
        if (b == 0) {
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (done.load() < n - (e - b)) {
            if (std::chrono::steady_clock::now() > give_up) {
              stole = false;
              break;
            }
            std::this_thread::yield();
          }
        }
        done.fetch_add(e - b);
      },
      step);
  EXPECT_TRUE(stole.load()) << "the worker did not take the caller's share";
  EXPECT_EQ(done.load(), n);
}

TEST(ThreadPoolShares, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0}, calls{0};
  pool.parallel_for_shares(
      8,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          pool.parallel_for_shares(
              10,
              [&](int64_t bb, int64_t ee) {
                total.fetch_add(ee - bb);
                calls.fetch_add(1);
              },
              3);
      },
      1);
  EXPECT_EQ(total.load(), 80);
  EXPECT_EQ(calls.load(), 8);  // each nested call ran serially: fn(0, 10) once
}

// Both orders through one pool, alternating, many times (the seqlock hand-off between them).
TEST(ThreadPoolShares, AlternatesWithParallelFor) {
  ThreadPool pool(3);
  int64_t sum = 0;
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int64_t> s{0};
    if (rep % 2) pool.parallel_for(16, [&](int64_t b, int64_t e) { s.fetch_add(e - b); });
    else pool.parallel_for_shares(16, [&](int64_t b, int64_t e) { s.fetch_add(e - b); }, 2);
    sum += s.load();
  }
  EXPECT_EQ(sum, 2000 * 16);
}

}  // namespace
}  // namespace strata
