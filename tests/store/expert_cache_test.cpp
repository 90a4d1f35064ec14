// ExpertCache's state machine driven directly (absent -> loading -> ready -> evicted), on the
// v41-tiny fixture checkpoint: hits and loads are counted where the class comment says, a pinned
// entry is never evicted, a failed read leaves the entry absent (never a ready slot of unread
// bytes), and pin_permanently keeps nothing whose read and retry both failed (issue 13 item 9).
#include "store/expert_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "io/checkpoint.h"
#include "io/file.h"
#include "io/uring_reader.h"
#include "store/expert_catalog.h"
#include "tests/support/npy.h"
#include "tests/support/tiny_model.h"

namespace strata::store {
namespace {

// One cache of `slots` slots over the tiny checkpoint, built the way TieredStore builds it.
struct Rig {
  std::unique_ptr<io::Checkpoint> ck;
  std::unique_ptr<ExpertCatalog> catalog;
  std::unique_ptr<io::UringReader> reader;
  std::unique_ptr<ExpertCache> cache;

  explicit Rig(int64_t slots, CachePolicy policy = CachePolicy::kLru) {
    auto c = io::Checkpoint::open(testing::tiny_dir() + "/checkpoint");
    EXPECT_TRUE(c.ok()) << c.error().to_string();
    ck = std::move(*c);
    auto cat = ExpertCatalog::build(*ck, /*n_layers=*/8, /*direct_io=*/false);
    EXPECT_TRUE(cat.ok()) << cat.error().to_string();
    catalog = std::make_unique<ExpertCatalog>(std::move(*cat));
    auto r = io::UringReader::create(io::UringReaderOptions{});
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    reader = std::move(*r);
    ExpertCacheOptions o;
    o.n_slots = slots;
    o.policy = policy;
    cache = std::make_unique<ExpertCache>(*ck, *catalog, *reader, nullptr, o);
    EXPECT_TRUE(cache->allocate().ok());
  }
  PlacementStats stats() const {
    PlacementStats s;
    cache->add_stats(&s);
    return s;
  }
  // Every read of expert `id`'s first tensor fails (EIO) from now on.
  void break_expert(int id) {
    const io::TensorInfo* t = catalog->plan(id).tensors[0];
    auto base = io::open_file(ck->shard(t->shard).path());
    ASSERT_TRUE(base.ok());
    ck->replace_shard_file(t->shard, io::make_faulty_file(std::move(*base), io::FaultSpec{t->offset + 7, 5}));
  }
  void heal(int shard) {
    auto base = io::open_file(ck->shard(shard).path());
    ASSERT_TRUE(base.ok());
    ck->replace_shard_file(shard, std::move(*base));
  }
  // The bytes the checkpoint holds for part 0 of expert `id`.
  std::vector<uint8_t> disk_bytes(int id) const {
    const io::TensorInfo* t = catalog->plan(id).tensors[0];
    std::vector<uint8_t> b(t->nbytes);
    EXPECT_TRUE(ck->read_range(*t, 0, t->nbytes, b.data()).ok());
    return b;
  }
};

bool same(const TensorView& v, const std::vector<uint8_t>& want) {
  return std::memcmp(v.data, want.data(), want.size()) == 0;
}

class ExpertCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/checkpoint/config.json"); }
};

TEST_F(ExpertCacheTest, MissThenHitThenEvictionInLruOrder) {
  Rig r(2);
  const int a = r.catalog->id(1, 0), b = r.catalog->id(1, 1), c = r.catalog->id(1, 2);
  ASSERT_GE(a, 0);
  {
    auto l = r.cache->acquire(a);  // absent -> loading -> ready: a miss and a load
    ASSERT_TRUE(l.ok()) << l.error().to_string();
    EXPECT_TRUE(same((*l)->view().w1, r.disk_bytes(a)));
  }
  EXPECT_EQ(r.stats().expert_misses, 1u);
  EXPECT_EQ(r.stats().expert_loads, 1u);
  ASSERT_TRUE(r.cache->acquire(a).ok());  // ready: a hit, no load
  EXPECT_EQ(r.stats().expert_hits, 1u);
  EXPECT_EQ(r.stats().expert_loads, 1u);
  ASSERT_TRUE(r.cache->acquire(b).ok());
  ASSERT_TRUE(r.cache->acquire(c).ok());  // two slots: the least recently used (a) goes
  EXPECT_EQ(r.stats().expert_evictions, 1u);
  ASSERT_TRUE(r.cache->acquire(b).ok());
  EXPECT_EQ(r.stats().expert_hits, 2u) << "b stayed";
  ASSERT_TRUE(r.cache->acquire(a).ok());
  EXPECT_EQ(r.stats().expert_loads, 4u) << "a was evicted and read again";
}

TEST_F(ExpertCacheTest, LeasedEntriesAreNeverEvicted) {
  Rig r(2);
  const int a = r.catalog->id(2, 0), b = r.catalog->id(2, 1), c = r.catalog->id(2, 2);
  auto la = r.cache->acquire(a);
  auto lb = r.cache->acquire(b);
  ASSERT_TRUE(la.ok() && lb.ok());
  auto lc = r.cache->acquire(c);  // both slots leased
  ASSERT_FALSE(lc.ok());
  EXPECT_EQ(lc.error().code(), StatusCode::kResourceExhausted) << lc.error().to_string();
  EXPECT_TRUE(same((*la)->view().w1, r.disk_bytes(a)));
  la->reset();
  auto again = r.cache->acquire(c);  // a's slot is free to take now
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_TRUE(same((*lb)->view().w1, r.disk_bytes(b)));
}

TEST_F(ExpertCacheTest, FailedReadLeavesTheEntryAbsentAndTheCacheUsable) {
  Rig r(2);
  const int a = r.catalog->id(3, 0);
  const int shard = r.catalog->plan(a).tensors[0]->shard;
  r.break_expert(a);
  auto l = r.cache->acquire(a);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), StatusCode::kIOError) << l.error().to_string();
  auto l2 = r.cache->acquire(a);  // still absent: read again, fails again (no hit on a bad slot)
  ASSERT_FALSE(l2.ok());
  EXPECT_EQ(r.stats().expert_hits, 0u);
  r.heal(shard);
  auto l3 = r.cache->acquire(a);
  ASSERT_TRUE(l3.ok()) << l3.error().to_string();
  EXPECT_TRUE(same((*l3)->view().w1, r.disk_bytes(a)));
}

TEST_F(ExpertCacheTest, PinnedEntriesStayAndAFailedPinIsNotKept) {
  Rig r(3);
  const int good = r.catalog->id(4, 0), bad = r.catalog->id(4, 1);
  const int shard = r.catalog->plan(bad).tensors[0]->shard;
  r.break_expert(bad);
  const int ids[] = {good, bad};
  Status s = r.cache->pin_permanently(ids);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pinning routed expert 1 of layer 4"), std::string::npos) << s.to_string();
  EXPECT_EQ(r.cache->n_permanent(), 1) << "only the expert whose bytes arrived is kept";
  // The failed one is not served from its slot: acquiring it reads (and fails) again.
  auto lb = r.cache->acquire(bad);
  EXPECT_FALSE(lb.ok());
  EXPECT_EQ(r.stats().expert_hits, 0u);
  // Stream other experts through the two free slots: the pinned one never leaves.
  r.heal(shard);
  for (int round = 0; round < 3; ++round)
    for (int e = 0; e < 8; ++e) ASSERT_TRUE(r.cache->acquire(r.catalog->id(5, e)).ok());
  const uint64_t loads = r.stats().expert_loads;
  auto lg = r.cache->acquire(good);
  ASSERT_TRUE(lg.ok());
  EXPECT_EQ(r.stats().expert_loads, loads) << "the pinned expert was a hit";
  EXPECT_TRUE(same((*lg)->view().w1, r.disk_bytes(good)));
  // Healed, the failed pin can be pinned again.
  const int again[] = {bad};
  EXPECT_TRUE(r.cache->pin_permanently(again).ok());
  EXPECT_EQ(r.cache->n_permanent(), 2);
}

TEST_F(ExpertCacheTest, PinWithNoSlotLeftIsRefusedAndKeepsNothingUnread) {
  Rig r(1);
  const int ids[] = {r.catalog->id(6, 0), r.catalog->id(6, 1)};
  Status s = r.cache->pin_permanently(ids);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
  EXPECT_EQ(r.cache->n_permanent(), 1);
}

TEST_F(ExpertCacheTest, PrefetchedReadIsCountedOnceAndUsed) {
  Rig r(4);
  const int ids[] = {r.catalog->id(7, 0), r.catalog->id(7, 1)};
  r.cache->prefetch(ids, PrefetchKind::kPredict);
  for (int id : ids) {
    auto l = r.cache->acquire(id);
    ASSERT_TRUE(l.ok());
    EXPECT_TRUE(same((*l)->view().w1, r.disk_bytes(id)));
  }
  const PlacementStats st = r.stats();
  EXPECT_EQ(st.expert_loads, 2u);
  EXPECT_EQ(st.prefetch_issued, 2u);
  EXPECT_EQ(st.prefetch_used, 2u);
  EXPECT_EQ(st.expert_misses, 0u);
  EXPECT_EQ(st.expert_acquires, 2u);
}

// A phase's rate counts the prefetches still waiting at its start: one issued before the mark and
// used after it is a hit of this phase, and the rate stays within [0, 1] (a demo decode of 8 steps
// read issued 1, used 2, rate 2.0 when it divided by this phase's issues alone).
TEST_F(ExpertCacheTest, PhasePrefetchHitRateCountsPrefetchesOutstandingAtItsStart) {
  Rig r(4);
  const int before[] = {r.catalog->id(7, 0)};
  const int during[] = {r.catalog->id(7, 1)};
  r.cache->prefetch(before, PrefetchKind::kPredict);
  const PlacementStats mark = r.stats();
  r.cache->prefetch(during, PrefetchKind::kPredict);
  for (int id : {before[0], during[0]}) ASSERT_TRUE(r.cache->acquire(id).ok());
  const PlacementStats phase = r.stats().since(mark);
  EXPECT_EQ(phase.prefetch_issued, 1u);
  EXPECT_EQ(phase.prefetch_used, 2u);
  EXPECT_EQ(phase.prefetch_outstanding_at_start, 1u);
  EXPECT_EQ(phase.prefetch_outstanding, 0u);  // both used
  EXPECT_DOUBLE_EQ(phase.prefetch_hit_rate(), 1.0);
}

// A prefetch evicted before any use is dropped: no longer outstanding, never used.
TEST_F(ExpertCacheTest, EvictedPrefetchIsNoLongerOutstanding) {
  Rig r(1);
  const int guess[] = {r.catalog->id(7, 0)};
  r.cache->prefetch(guess, PrefetchKind::kPredict);
  EXPECT_EQ(r.stats().prefetch_outstanding, 1u);
  ASSERT_TRUE(r.cache->acquire(r.catalog->id(7, 1)).ok());  // the one slot: the guess is evicted unused
  const PlacementStats st = r.stats();
  EXPECT_EQ(st.expert_evictions, 1u);
  EXPECT_EQ(st.prefetch_issued, 1u);
  EXPECT_EQ(st.prefetch_used, 0u);
  EXPECT_EQ(st.prefetch_outstanding, 0u);
  EXPECT_DOUBLE_EQ(st.prefetch_hit_rate(), 0.0);
}

}  // namespace
}  // namespace strata::store
