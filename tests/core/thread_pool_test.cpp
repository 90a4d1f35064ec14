#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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

}  // namespace
}  // namespace strata
