// Scheduler::select_slot (issue 14 item 6, issue 17 item 4): which free slot a prompt takes and how
// many of its tokens the slot's session saves, extending it or rewinding it to the common prefix.
#include <gtest/gtest.h>

#include <vector>

#include "server/scheduler.h"

namespace strata::server {
namespace {

using Pick = Scheduler::Pick;

struct Slots {
  std::vector<std::vector<int32_t>> h;
  std::vector<int64_t> floors;
  std::vector<uint64_t> used;
  std::vector<char> free;  // vector<bool> has no span
  Pick pick(const std::vector<int32_t>& prompt) const {
    std::vector<const std::vector<int32_t>*> hp;
    for (const auto& x : h) hp.push_back(&x);
    std::unique_ptr<bool[]> f(new bool[free.size()]);
    for (size_t i = 0; i < free.size(); ++i) f[i] = free[i] != 0;
    return Scheduler::select_slot(hp, floors, used, std::span<const bool>(f.get(), free.size()), prompt);
  }
};

TEST(SchedulerSelectSlot, ExtendsAWholeHistory) {
  // Slot 1's history is a proper prefix: extended, whatever its floor.
  const Slots s{{{1, 2, 9}, {1, 2, 3}}, {3, 3}, {1, 2}, {1, 1}};
  const Pick p = s.pick({1, 2, 3, 4, 5});
  EXPECT_EQ(p.slot, 1);
  EXPECT_EQ(p.reused, 3);
  EXPECT_FALSE(p.rewind);
}

TEST(SchedulerSelectSlot, RewindsToTheCommonPrefixWithinTheFloor) {
  // The prompt changes the tail of slot 0's history at token 4: rewound to 4 (floor 2).
  const Slots s{{{1, 2, 3, 4, 5, 6, 7}, {1, 2}}, {2, 2}, {1, 2}, {1, 1}};
  Pick p = s.pick({1, 2, 3, 4, 8, 9});
  EXPECT_EQ(p.slot, 0);
  EXPECT_EQ(p.reused, 4);
  EXPECT_TRUE(p.rewind);
  // A prompt that is a prefix of the history (a regenerated answer): all but its last token, which
  // must run for logits.
  p = s.pick({1, 2, 3, 4, 5});
  EXPECT_EQ(p.slot, 0);
  EXPECT_EQ(p.reused, 4);
  EXPECT_TRUE(p.rewind);
  // The same prompt as the whole history.
  p = s.pick({1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(p.reused, 6);
  EXPECT_TRUE(p.rewind);
}

TEST(SchedulerSelectSlot, RefusesARewindPastTheFloor) {
  // Slot 0 could give 4 tokens, but its undo log reaches back only to 5: slot 1 extends 2 instead.
  Slots s{{{1, 2, 3, 4, 5, 6, 7}, {1, 2}}, {5, 2}, {1, 2}, {1, 1}};
  Pick p = s.pick({1, 2, 3, 4, 8, 9});
  EXPECT_EQ(p.slot, 1);
  EXPECT_EQ(p.reused, 2);
  EXPECT_FALSE(p.rewind);
  // Nothing reusable: the least recently used slot, reused 0 (a fresh session).
  s.h[1] = {7, 7};
  p = s.pick({1, 2, 3, 4, 8, 9});
  EXPECT_EQ(p.slot, 0);
  EXPECT_EQ(p.reused, 0);
  EXPECT_FALSE(p.rewind);
  // Exactly at the floor is fine.
  s.floors[0] = 4;
  p = s.pick({1, 2, 3, 4, 8, 9});
  EXPECT_EQ(p.slot, 0);
  EXPECT_EQ(p.reused, 4);
  EXPECT_TRUE(p.rewind);
}

TEST(SchedulerSelectSlot, LongestReuseThenLeastRecentlyUsedAndBusySlotsSkipped) {
  Slots s{{{1, 2, 3, 9}, {1, 2, 3, 8}, {1, 2, 3, 4, 5, 6}}, {0, 0, 0}, {5, 3, 1}, {1, 1, 0}};
  // Slot 2 shares the most but is busy; slots 0 and 1 tie at 3 by rewind: the older one (1).
  Pick p = s.pick({1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(p.slot, 1);
  EXPECT_EQ(p.reused, 3);
  EXPECT_TRUE(p.rewind);
  s.free = {0, 0, 0};
  EXPECT_EQ(s.pick({1, 2}).slot, -1);
}

TEST(SchedulerSelectSlot, EmptySlotBeforeARewindKeepingLessThanHalf) {
  // Slot 0's conversation shares only 2 of its 7 tokens with the prompt: an empty slot is taken
  // rather than cutting it back; with no empty slot the rewind is used; half or more is rewound.
  Slots s{{{1, 2, 3, 4, 5, 6, 7}, {}}, {0, 0}, {1, 2}, {1, 1}};
  Pick p = s.pick({1, 2, 8, 9});
  EXPECT_EQ(p.slot, 1);
  EXPECT_EQ(p.reused, 0);
  s.free[1] = 0;
  p = s.pick({1, 2, 8, 9});
  EXPECT_EQ(p.slot, 0);
  EXPECT_EQ(p.reused, 2);
  EXPECT_TRUE(p.rewind);
  s.free[1] = 1;
  p = s.pick({1, 2, 3, 4, 8, 9});
  EXPECT_EQ(p.slot, 0);
  EXPECT_EQ(p.reused, 4);
  EXPECT_TRUE(p.rewind);
}

}  // namespace
}  // namespace strata::server
