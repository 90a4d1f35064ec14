// Expert parallelism's model half (model/expert_peers.h) without MPI: a loopback ExpertPeers that
// answers each message with run_expert_tasks on a second copy of the store. A forward with peers
// must give logits bit-identical to one without, at every partition over 1..5 "ranks", for prompt
// chunks, decode steps and a mixed batch; the partition function covers every expert once in
// contiguous near-equal ranges; malformed tasks and peer errors come back as errors.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/expert_peers.h"
#include "model/moe.h"
#include "tests/support/chunked_logits.h"
#include "tests/support/tiny_suite.h"

namespace strata::model {
namespace {

TEST(ExpertOwner, ContiguousNearEqualRangesCoverEveryExpert) {
  for (int E : {1, 3, 8, 384})
    for (int N = 1; N <= 9; ++N) {
      std::vector<int> count(static_cast<size_t>(N), 0);
      int prev = 0;
      for (int e = 0; e < E; ++e) {
        const int r = expert_owner(e, E, N);
        ASSERT_GE(r, prev) << "E " << E << " N " << N << " e " << e;  // contiguous, ascending
        ASSERT_LT(r, N);
        prev = r;
        ++count[static_cast<size_t>(r)];
      }
      for (int r = 0; r < N; ++r) {
        EXPECT_GE(count[static_cast<size_t>(r)], E / N) << "E " << E << " N " << N << " r " << r;
        EXPECT_LE(count[static_cast<size_t>(r)], (E + N - 1) / N) << "E " << E << " N " << N << " r " << r;
      }
    }
}

TEST(WeightedExpertRanges, HandComputedCases) {
  struct Case {
    int experts;
    std::vector<uint64_t> weights;
    std::vector<int32_t> bounds;
  };
  const Case cases[] = {
      {8, {1, 1}, {0, 4, 8}},
      {8, {1, 3}, {0, 2, 8}},            // 8 * 1/4 = 2
      {10, {1, 1, 1}, {0, 3, 6, 10}},    // floor(10/3) = 3, floor(20/3) = 6: expert_owner's ranges
      {384, {64, 128}, {0, 128, 384}},   // 64 GiB and 128 GiB boxes
      {384, {128, 64, 64}, {0, 192, 288, 384}},
      {8, {0, 1}, {0, 0, 8}},            // rank 0 of weight 0 owns none
      {8, {3, 0, 1}, {0, 6, 6, 8}},      // so does rank 1
      {7, {2, 1}, {0, 4, 7}},            // floor(14/3) = 4
      {1, {1, 1, 1}, {0, 0, 0, 1}},      // one expert: the last rank with weight owns it
      {384, {1ull << 40, 1ull << 41}, {0, 128, 384}},  // byte-sized weights do not overflow
  };
  for (const Case& c : cases) {
    auto b = weighted_expert_ranges(c.experts, c.weights);
    ASSERT_TRUE(b.ok()) << b.error().to_string();
    EXPECT_EQ(*b, c.bounds) << c.experts << " experts, " << c.weights.size() << " ranks";
    for (int32_t e = 0; e < c.experts; ++e) {
      const int r = owner_in_ranges(*b, e);
      ASSERT_GE(r, 0);
      ASSERT_LT(r, static_cast<int>(c.weights.size()));
      EXPECT_GE(e, c.bounds[static_cast<size_t>(r)]);
      EXPECT_LT(e, c.bounds[static_cast<size_t>(r) + 1]) << "expert " << e << " given to rank " << r;
    }
  }
  EXPECT_EQ(owner_in_ranges(std::vector<int32_t>{0, 6, 6, 8}, 6), 2);  // skips the empty rank 1
}

TEST(WeightedExpertRanges, EqualWeightsAreExpertOwner) {
  for (int E : {1, 3, 8, 384})
    for (int N = 1; N <= 9; ++N) {
      auto b = weighted_expert_ranges(E, std::vector<uint64_t>(static_cast<size_t>(N), 5));
      ASSERT_TRUE(b.ok());
      for (int e = 0; e < E; ++e) EXPECT_EQ(owner_in_ranges(*b, e), expert_owner(e, E, N)) << E << " " << N << " " << e;
    }
}

TEST(WeightedExpertRanges, Errors) {
  EXPECT_EQ(weighted_expert_ranges(8, std::vector<uint64_t>{}).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(weighted_expert_ranges(8, std::vector<uint64_t>{0, 0}).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(weighted_expert_ranges(0, std::vector<uint64_t>{1}).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(weighted_expert_ranges(8, std::vector<uint64_t>{1ull << 62, 1ull << 62}).error().code(),
            StatusCode::kInvalidArgument);
}

// The partition by RAM and disk rate (issue 18 item 1), in GB so the shares read as a plan would.
TEST(CapacityWeights, RamWhenEverythingFitsDiskRateForTheRest) {
  constexpr uint64_t G = 1000000000;
  // 300 GB of experts, rank 0 holds 20 GB of dense weights. Two 256 GB boxes: all in RAM, in
  // proportion to the RAM left for experts (236 : 256).
  {
    const std::vector<RankCapacity> r = {{256 * G, 2 * G}, {256 * G, 1 * G}};
    const std::vector<uint64_t> w = capacity_weights(r, 300 * G, 20 * G);
    EXPECT_EQ(w[0] + w[1], 300 * G - 1) << "floor of each share";
    EXPECT_NEAR(static_cast<double>(w[0]) / static_cast<double>(w[1]), 236.0 / 256.0, 1e-9);
  }
  // Two 128 GB boxes, disks 3 and 1 GB/s: each keeps what its RAM holds (108 and 128 GB), the 64 GB
  // that fit nowhere go 3:1 to the faster disk.
  {
    const std::vector<RankCapacity> r = {{128 * G, 3 * G}, {128 * G, 1 * G}};
    const std::vector<uint64_t> w = capacity_weights(r, 300 * G, 20 * G);
    EXPECT_EQ(w[0], 108 * G + 48 * G);
    EXPECT_EQ(w[1], 128 * G + 16 * G);
  }
  // No disk rate anywhere: the rest follows RAM; a rank whose RAM the resident set takes (rank 0
  // with 16 GB) gets only its disk share, here none.
  {
    const std::vector<RankCapacity> r = {{16 * G, 0}, {100 * G, 0}, {100 * G, 0}};
    const std::vector<uint64_t> w = capacity_weights(r, 300 * G, 20 * G);
    EXPECT_EQ(w[0], 0u);
    EXPECT_EQ(w[1], 150 * G);
    EXPECT_EQ(w[2], 150 * G);
    auto b = weighted_expert_ranges(384, w);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)[1], 0) << "rank 0 owns no expert";
    EXPECT_EQ((*b)[2], 192);
  }
  // Nothing known: equal weights.
  EXPECT_EQ(capacity_weights(std::vector<RankCapacity>(3), 300 * G, 0), (std::vector<uint64_t>{1, 1, 1}));
}

// Peers in this process: each "rank" r >= 1 computes its experts with run_expert_tasks on `store`.
class LoopbackPeers : public ExpertPeers {
 public:
  LoopbackPeers(const ModelConfig& c, store::WeightStore* s, int n_ranks, std::vector<int32_t> bounds = {})
      : c_(c), store_(s), n_(n_ranks), bounds_(std::move(bounds)) {}
  int owner(int, int32_t expert) const override {
    return bounds_.empty() ? expert_owner(expert, c_.n_routed_experts, n_) : owner_in_ranges(bounds_, expert);
  }
  Status submit(int peer, int layer, std::span<const ExpertTask> tasks, std::span<const float> x,
                std::span<const float> scale) override {
    ++messages;
    for (const ExpertTask& t : tasks)
      if (owner(layer, t.expert) != peer) return Internal("task for expert " + std::to_string(t.expert) + " sent to the wrong rank");
    answer_[peer].assign(x.size(), 0.0f);  // [sum m, dim]
    if (fail_rank == peer) return Status();
    return run_expert_tasks(c_, layer, *store_, tasks, x.data(), scale.data(), answer_[peer].data(), nullptr);
  }
  Status collect(int peer, std::span<float> y) override {
    if (fail_rank == peer) return IOError("rank " + std::to_string(peer) + " is gone");
    if (y.size() != answer_[peer].size()) return Internal("answer size");
    std::memcpy(y.data(), answer_[peer].data(), y.size() * sizeof(float));
    return Status();
  }
  int messages = 0;
  int fail_rank = -1;

 private:
  ModelConfig c_;
  store::WeightStore* store_;
  int n_;
  std::vector<int32_t> bounds_;
  std::vector<float> answer_[16];
};

class ExpertPeersTiny : public testing::TinyModelSuite<ExpertPeersTiny> {
 protected:
  // Logits of the fixture prompt in two chunks then 4 greedy decode steps, all rows concatenated.
  static std::vector<float> run(const Model& m) { return testing::chunked_then_decode_logits(m, ids_); }
};

TEST_F(ExpertPeersTiny, LogitsBitIdenticalAtEveryPartition) {
  const std::vector<float> want = run(*model_);
  auto second = testing::load_model(testing::tiny_dir() + "/checkpoint", 1);  // the peers' own store
  ASSERT_TRUE(second.ok()) << second.error().to_string();
  for (int n = 1; n <= 5; ++n) {
    LoopbackPeers peers(model_->config(), &(*second)->store(), n);
    auto v = testing::vocab_of(testing::tiny_dir() + "/checkpoint");
    ASSERT_TRUE(v.ok());
    ModelOptions opt;
    opt.n_threads = 2;
    opt.expert_peers = &peers;
    auto m = Model::load(testing::tiny_dir() + "/checkpoint", *v, opt);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const std::vector<float> got = run(**m);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << n << " ranks: logits differ";
    if (n == 1) EXPECT_EQ(peers.messages, 0);
    else EXPECT_GT(peers.messages, 0) << n << " ranks: no expert went to a peer";
  }
}

TEST_F(ExpertPeersTiny, LogitsBitIdenticalAtWeightedPartitions) {
  const std::vector<float> want = run(*model_);
  auto second = testing::load_model(testing::tiny_dir() + "/checkpoint", 1);
  ASSERT_TRUE(second.ok()) << second.error().to_string();
  auto v = testing::vocab_of(testing::tiny_dir() + "/checkpoint");
  ASSERT_TRUE(v.ok());
  const int E = model_->config().n_routed_experts;
  const std::vector<std::vector<uint64_t>> weights = {{1, 3}, {0, 1}, {3, 0, 1}, {5, 1, 2, 1}};
  for (const std::vector<uint64_t>& w : weights) {
    auto b = weighted_expert_ranges(E, w);
    ASSERT_TRUE(b.ok());
    LoopbackPeers peers(model_->config(), &(*second)->store(), static_cast<int>(w.size()), *b);
    ModelOptions opt;
    opt.n_threads = 2;
    opt.expert_peers = &peers;
    auto m = Model::load(testing::tiny_dir() + "/checkpoint", *v, opt);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const std::vector<float> got = run(**m);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << w.size() << " ranks: logits differ";
    EXPECT_GT(peers.messages, 0);
  }
}

TEST_F(ExpertPeersTiny, PeerErrorEndsTheForwardNamingIt) {
  auto v = testing::vocab_of(testing::tiny_dir() + "/checkpoint");
  ASSERT_TRUE(v.ok());
  LoopbackPeers peers(model_->config(), &model_->store(), 2);
  peers.fail_rank = 1;
  ModelOptions opt;
  opt.expert_peers = &peers;
  auto m = Model::load(testing::tiny_dir() + "/checkpoint", *v, opt);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  Activations act = (*m)->new_activations();
  KvCache cache = (*m)->new_cache();
  std::vector<float> row(static_cast<size_t>((*m)->config().vocab_size));
  ForwardEntry e;
  e.cache = &cache;
  e.tokens = ids_;
  e.kind = RowKind::kPrompt;
  e.logits_out = row.data();
  Status s = (*m)->forward(ForwardRequest{std::span<ForwardEntry>(&e, 1), nullptr}, act);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("rank 1 is gone"), std::string::npos) << s.to_string();
}

TEST_F(ExpertPeersTiny, MalformedTasksAreRefused) {
  const ModelConfig& c = model_->config();
  std::vector<float> x(static_cast<size_t>(c.dim), 0.5f), scale(1, 1.0f), y(static_cast<size_t>(c.dim));
  const ExpertTask bad[] = {{c.n_routed_experts, 1, 1}, {0, 0, 0}, {0, 1, 2}, {0, 1, -2}};
  for (const ExpertTask& t : bad) {
    Status s = run_expert_tasks(c, 0, model_->store(), std::span<const ExpertTask>(&t, 1), x.data(), scale.data(),
                                y.data(), nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << t.expert << " " << t.m << " " << t.n_decode;
  }
  const ExpertTask unordered[] = {{2, 1, 1}, {1, 1, 1}};
  std::vector<float> x2(2 * static_cast<size_t>(c.dim), 0.5f), s2(2, 1.0f), y2(2 * static_cast<size_t>(c.dim));
  EXPECT_EQ(run_expert_tasks(c, 0, model_->store(), unordered, x2.data(), s2.data(), y2.data(), nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::model
