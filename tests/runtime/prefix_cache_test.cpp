// Prefix cache over the v41-tiny checkpoint: a request resumed from a turn-boundary or chunk-boundary
// snapshot gives bit-identical logits (and decode) to a cold run; full hits need no forward;
// replayed snapshots never serve exact requests; snapshots share pages and respect the budget.
#include "runtime/prefix_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/npy.h"
#include "tests/support/tiny_model.h"
#include "tests/support/tiny_suite.h"

namespace strata::runtime {
namespace {

class PrefixCacheTiny : public testing::TinyModelSuite<PrefixCacheTiny> {
 protected:
  static bool same(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }
  // Greedy decode; every step's logits.
  static std::vector<float> decode(Session& s, int n) {
    std::vector<float> out;
    for (int i = 0; i < n; ++i) {
      auto l = s.last_logits();
      const int32_t next[1] = {static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin())};
      EXPECT_TRUE(s.append(next, nullptr).ok());
      out.insert(out.end(), s.last_logits().begin(), s.last_logits().end());
    }
    return out;
  }
};

TEST_F(PrefixCacheTiny, TurnBoundarySnapshotGivesColdLogits) {
  PrefixCache pc;
  std::span<const int32_t> all(ids_);
  AppendOptions o;  // chunk 2048: one chunk per append
  // Turn 1: the first 120 tokens (snapshot at its end).
  Session turn1(*model_);
  int64_t reused = -1;
  ASSERT_TRUE(prefill_with_cache(pc, &turn1, all.subspan(0, 120), o, &reused).ok());
  EXPECT_EQ(reused, 0);
  // Turn 2 shares those 120 tokens.
  Session warm(*model_);
  ASSERT_TRUE(prefill_with_cache(pc, &warm, all, o, &reused).ok());
  EXPECT_EQ(reused, 120);
  Session cold(*model_);
  ASSERT_TRUE(cold.append(all, o).ok());
  EXPECT_EQ(warm.tokens(), cold.tokens());
  EXPECT_TRUE(same(warm.last_logits(), cold.last_logits()));
  auto a = decode(warm, 6);
  auto b = decode(cold, 6);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  auto st = pc.stats();
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.tokens_reused, 120);
  EXPECT_EQ(st.entries, 2);
}

TEST_F(PrefixCacheTiny, ChunkBoundarySnapshotOfAnotherRequest) {
  PrefixCache pc;
  AppendOptions o;
  o.chunk = 64;
  Session first(*model_);
  ASSERT_TRUE(prefill_with_cache(pc, &first, ids_, o).ok());  // snapshots at 64, 128, 192 and 197
  EXPECT_EQ(pc.stats().entries, 4);
  // Another request: the first 150 tokens, then a different continuation.
  std::vector<int32_t> other(ids_.begin(), ids_.begin() + 150);
  for (int32_t t : {500, 501, 502, 503, 504, 505, 506, 507, 508, 509, 510, 511, 512, 513, 514, 515, 516, 517, 518, 519})
    other.push_back(t);
  Session warm(*model_);
  int64_t reused = 0;
  ASSERT_TRUE(prefill_with_cache(pc, &warm, other, o, &reused).ok());
  EXPECT_EQ(reused, 128);
  Session cold(*model_);
  ASSERT_TRUE(cold.append(other, o).ok());
  EXPECT_TRUE(same(warm.last_logits(), cold.last_logits()));
}

TEST_F(PrefixCacheTiny, FullHitNeedsNoForward) {
  PrefixCache pc;
  Session a(*model_);
  ASSERT_TRUE(prefill_with_cache(pc, &a, ids_, AppendOptions{}).ok());
  Session b(*model_);
  int64_t reused = 0;
  ASSERT_TRUE(prefill_with_cache(pc, &b, ids_, AppendOptions{}, &reused).ok());
  EXPECT_EQ(reused, static_cast<int64_t>(ids_.size()));
  EXPECT_TRUE(same(a.last_logits(), b.last_logits()));
  // A 3-token remainder resumes from the whole-prompt snapshot and gives a cold prefill's logits
  // bit for bit (prompt rows take the GEMM at any count: no minimum remainder is needed).
  std::vector<int32_t> longer = ids_;
  longer.insert(longer.end(), {7, 8, 9});
  Session c(*model_);
  ASSERT_TRUE(prefill_with_cache(pc, &c, longer, AppendOptions{}, &reused).ok());
  EXPECT_EQ(reused, static_cast<int64_t>(ids_.size()));
  Session cold(*model_);
  ASSERT_TRUE(cold.append(longer, AppendOptions{}).ok());
  EXPECT_TRUE(same(c.last_logits(), cold.last_logits()));
  // With a minimum remainder the snapshot is passed over.
  PrefixCacheOptions po;
  po.min_recompute = 16;
  PrefixCache strict(po);
  Session d(*model_);
  ASSERT_TRUE(prefill_with_cache(strict, &d, ids_, AppendOptions{}).ok());
  Session e(*model_);
  ASSERT_TRUE(prefill_with_cache(strict, &e, longer, AppendOptions{}, &reused).ok());
  EXPECT_EQ(reused, 0);
}

TEST_F(PrefixCacheTiny, ReplayedSnapshotsNeverServeExactRequests) {
  PrefixCache pc;
  AppendOptions r;
  r.mode = PrefillMode::kReplay;
  Session a(*model_);
  std::span<const int32_t> all(ids_);
  ASSERT_TRUE(prefill_with_cache(pc, &a, all.subspan(0, 150), r).ok());
  EXPECT_TRUE(a.replayed());
  Session exact(*model_);
  int64_t reused = -1;
  ASSERT_TRUE(prefill_with_cache(pc, &exact, all, AppendOptions{}, &reused).ok());
  EXPECT_EQ(reused, 0);
  Session again(*model_);
  ASSERT_TRUE(prefill_with_cache(pc, &again, all, r, &reused).ok());
  EXPECT_GE(reused, 150);  // a replay request may resume a replayed (or an exact) state
}

TEST_F(PrefixCacheTiny, SharedPagesAreCountedOnceAndTheBudgetHolds) {
  std::span<const int32_t> all(ids_);
  // Long enough to fill a 64 KiB page of the ratio-1 source's compressed KV (36-byte rows at head_dim 64: 1820 per page).
  std::vector<int32_t> long_ids;
  for (int r = 0; r < 10; ++r) long_ids.insert(long_ids.end(), ids_.begin(), ids_.end());
  std::span<const int32_t> lng(long_ids);
  PrefixCache big;
  Session s(*model_);
  ASSERT_TRUE(s.append(lng.subspan(0, 1900), nullptr).ok());
  ASSERT_GT(s.cache().layers[5].compressed.size(), s.cache().layers[5].compressed.rows_per_page());
  big.insert(s);
  const uint64_t one = big.stats().bytes;
  ASSERT_TRUE(s.append(lng.subspan(1900), nullptr).ok());
  big.insert(s);
  const uint64_t two = big.stats().bytes;
  PrefixCache alone;
  alone.insert(s);
  // The second snapshot shares the first one's full page: together they cost one page less than
  // two unshared snapshots.
  EXPECT_EQ(two + s.cache().layers[5].compressed.page_bytes(), one + alone.stats().bytes);
  Session fresh(*model_);
  ASSERT_TRUE(fresh.append(all, nullptr).ok());
  PrefixCache alone197;
  alone197.insert(fresh);
  // A budget for about one snapshot keeps the most recently used one.
  PrefixCacheOptions o;
  o.budget_bytes = alone197.stats().bytes + alone197.stats().bytes / 4;
  PrefixCache small(o);
  Session x(*model_);
  ASSERT_TRUE(x.append(all.subspan(0, 100), nullptr).ok());
  small.insert(x);
  small.insert(fresh);
  auto st = small.stats();
  EXPECT_LE(st.bytes, o.budget_bytes);
  EXPECT_EQ(st.evictions, 1);
  Session y(*model_);
  EXPECT_EQ(small.restore(all, PrefillMode::kExact, &y), static_cast<int64_t>(ids_.size()));
  PrefixCacheOptions tiny;
  tiny.budget_bytes = 1000;  // smaller than any snapshot: nothing is kept
  PrefixCache none(tiny);
  none.insert(fresh);
  EXPECT_EQ(none.stats().entries, 0);
}

}  // namespace
}  // namespace strata::runtime
