// `strata plan --hosts` (tools/plan_hosts.h): the hosts file's errors name line and field; the
// expert-parallel time model reproduces hand-computed values on the tiny fixture's config (8 experts,
// top-3): the expected slowest rank over every way 3 picks fall on 2 ranks, the per-layer message
// count and bytes, and latency that adds 2 x latency per layer with a remote pick.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "io/file.h"
#include "tools/plan_hosts.h"

namespace strata::tools {
namespace {

const std::string kTinyConfig = std::string(STRATA_FIXTURES_DIR) + "/v41-tiny/checkpoint/config.json";

TEST(PlanHosts, ParsesHostsAndNamesBadLines) {
  auto h = parse_hosts("# rank 0 first\nbox0 ram=128G disk_gbps=3 link_gbps=25 latency_us=30\n\nbox1 ram=64G "
                       "link_gbps=100 latency_us=5 # no disk\n",
                       "hosts.txt");
  ASSERT_TRUE(h.ok()) << h.error().to_string();
  ASSERT_EQ(h->size(), 2u);
  EXPECT_EQ((*h)[0].name, "box0");
  EXPECT_EQ((*h)[0].ram_bytes, 128ull << 30);
  EXPECT_DOUBLE_EQ((*h)[0].disk_gbps, 3);
  EXPECT_DOUBLE_EQ((*h)[1].link_gbps, 100);
  EXPECT_DOUBLE_EQ((*h)[1].latency_us, 5);
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"a ram=1G link_gbps=1\n", "line 1 (a): ram=, link_gbps= and latency_us= are required"},
           {"a ram=1G link_gbps=1 latency_us=x\n", "line 1: latency_us must be a number"},
           {"\na ram=1G link_gbps=1 latency_us=1 speed=3\n", "line 2: unknown key 'speed'"},
           {"a ram=lots link_gbps=1 latency_us=1\n", "line 1 ram"},
           {"a ram=1G link_gbps=0 latency_us=1\n", "link_gbps must be > 0"},
           {"a 1G\n", "'1G' is not KEY=VALUE"},
           {"# nothing\n", "no hosts"}}) {
    auto r = parse_hosts(text, "hosts.txt");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().to_string().find(want), std::string::npos) << r.error().to_string();
  }
}

class PlanHostsTiny : public ::testing::Test {
 protected:
  void SetUp() override {
    auto text = io::read_file_to_string(kTinyConfig);
    if (!text.ok()) GTEST_SKIP() << "fixture missing: " << kTinyConfig;
    auto c = model::ModelConfig::parse(*text, kTinyConfig);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    c_ = *c;
    auto f = model_footprint(c_);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    f_ = *f;
    for (int l = 0; l < c_.n_layers; ++l) picks_ += c_.n_active(l), moe_layers_ += c_.n_active(l) > 0;
    // One machine: 1 ms per routed pick, 5 ms of everything else.
    single_.add("routed experts", 1e-3 * picks_);
    single_.add("fp8 linears", 5e-3);
    single_.finish(false);
  }
  static Host host(double link_gbps, double latency_us) { return Host{"h", 1ull << 40, 0, link_gbps, latency_us}; }

  model::ModelConfig c_;
  ModelFootprint f_;
  Cost single_;
  int picks_ = 0, moe_layers_ = 0;
};

TEST_F(PlanHostsTiny, OneRankIsTheOneMachineCost) {
  const ExpertParallelPlan e = plan_expert_parallel(c_, f_, single_, 0, {host(25, 30)});
  EXPECT_NEAR(e.token_s, single_.total_s, 1e-12);
  EXPECT_EQ(e.messages_per_layer, 0);
  EXPECT_EQ(e.comm_s_per_token, 0);
}

TEST_F(PlanHostsTiny, TwoRanksSlowestRankOverEveryOutcome) {
  ASSERT_EQ(c_.n_routed_experts, 8);
  ASSERT_EQ(c_.n_activated_experts, 3);
  // An ideal link: per layer E[max(c0, c1)] picks of 1 ms with 3 picks on two halves:
  // (3,0),(0,3) at 1/8 each -> 3; (2,1),(1,2) at 3/8 each -> 2: 2.25.
  const ExpertParallelPlan e = plan_expert_parallel(c_, f_, single_, 0, {host(1e9, 0), host(1e9, 0)});
  EXPECT_NEAR(e.token_s, 5e-3 + moe_layers_ * 2.25e-3, 1e-9);
  // Rank 1 has picks unless all 3 fall on rank 0 (1/8): 3 messages each time.
  EXPECT_NEAR(e.messages_per_layer, 3 * 7.0 / 8, 1e-12);
  // Bytes: header 8 (2 + 3c) + request 4 c (dim + 1) + answer 4 c dim, E[c1] = 1.5.
  const double dim = c_.dim;
  EXPECT_NEAR(e.bytes_per_layer, 8 * (2 * 7.0 / 8 + 3 * 1.5) + 4 * 1.5 * (dim + 1) + 4 * 1.5 * dim, 1e-6);
  // 1 ms one-way latency: rank 1's side costs 2 ms more whenever it has picks, and then it is the
  // slowest: E over outcomes of max(c0, 2 + c1) ms with c1 > 0, c0 when c1 = 0.
  const ExpertParallelPlan slow = plan_expert_parallel(c_, f_, single_, 0, {host(1e9, 1000), host(1e9, 1000)});
  const double per_layer_ms = (1.0 / 8) * 3 + (3.0 / 8) * std::max(2.0, 3.0) + (3.0 / 8) * std::max(1.0, 4.0) +
                              (1.0 / 8) * std::max(0.0, 5.0);
  EXPECT_NEAR(slow.token_s, 5e-3 + moe_layers_ * per_layer_ms * 1e-3, 1e-9);
  EXPECT_GT(slow.comm_s_per_token, 0);
}

TEST_F(PlanHostsTiny, RamShortfallCountsDiskReads) {
  // Both ranks (equal RAM under 1 GiB: equal weights, 4 experts each) hold half their experts'
  // bytes: half their uses are read at 1 GB/s.
  const uint64_t half = static_cast<uint64_t>(f_.expert_bytes) * 4 * moe_layers_ / 2;
  Host h0{"h0", half, 1.0, 1e9, 0}, h1{"h1", half, 1.0, 1e9, 0};
  const ExpertParallelPlan e = plan_expert_parallel(c_, f_, single_, 0, {h0, h1});
  ASSERT_EQ(e.hosts.size(), 2u);
  EXPECT_EQ(e.hosts[1].experts, 4 * moe_layers_);
  EXPECT_NEAR(e.hosts[1].hit_rate, 0.5, 1e-12);
  EXPECT_NEAR(e.hosts[0].hit_rate, 0.5, 1e-12);
  EXPECT_GT(e.token_s, plan_expert_parallel(c_, f_, single_, 0, {host(1e9, 0), host(1e9, 0)}).token_s);
  // With no disk rate anywhere the experts that fit in no RAM follow RAM: both ranks miss, unread.
  Host no_disk0{"h0", half, 0, 1e9, 0}, no_disk1{"h1", half, 0, 1e9, 0};
  EXPECT_FALSE(plan_expert_parallel(c_, f_, single_, 0, {no_disk0, no_disk1}).notes.empty());
  // With one disk rate, what fits nowhere goes to the rank that has the disk: the other misses nothing.
  Host disk_only0{"h0", half, 1.0, 1e9, 0};
  const ExpertParallelPlan d = plan_expert_parallel(c_, f_, single_, 0, {disk_only0, no_disk1});
  EXPECT_TRUE(d.notes.empty());
  EXPECT_NEAR(d.hosts[1].hit_rate, 1.0, 1e-12);
  EXPECT_EQ(d.hosts[0].experts, 6 * moe_layers_);
}

TEST_F(PlanHostsTiny, SharesFollowRam) {
  // RAM for a quarter and for three quarters of the experts: 8 experts split [0, 2) and [2, 8) per
  // layer, as --mpi splits them (model::capacity_weights, then weighted_expert_ranges).
  const uint64_t all = f_.routed_bytes;
  Host small{"small", all / 4, 0, 1e9, 0}, big{"big", all / 4 * 3, 0, 1e9, 0};
  const ExpertParallelPlan e = plan_expert_parallel(c_, f_, single_, 0, {small, big});
  ASSERT_EQ(e.hosts.size(), 2u);
  EXPECT_EQ(e.hosts[0].experts, 2 * moe_layers_);
  EXPECT_EQ(e.hosts[1].experts, 6 * moe_layers_);
  // Rank 1 has picks unless all 3 fall on rank 0 ((1/4)^3).
  EXPECT_NEAR(e.messages_per_layer, 3 * (1 - 1.0 / 64), 1e-12);
  // RAM for everything on both (1 TiB and 3 TiB): equal shares, the compute split evenly.
  Host huge{"huge", 3ull << 40, 0, 1e9, 0};
  const ExpertParallelPlan q = plan_expert_parallel(c_, f_, single_, 0, {host(1e9, 0), huge});
  EXPECT_EQ(q.hosts[0].experts, q.hosts[1].experts);
}

}  // namespace
}  // namespace strata::tools
