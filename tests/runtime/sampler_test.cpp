#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace strata::runtime {
namespace {

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  SamplerOptions o;
  o.temperature = 0;
  Sampler s(o);
  std::vector<float> l{0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(s.sample(l), 1);
  EXPECT_EQ(argmax(l), 1);
}

// argmax against the plain scan over a vocabulary-sized vector: lengths around its 16 lanes, the
// maximum in the tail, ties (first wins, also when a later lane holds the earlier index), NaNs
// (never win), an all -inf vector and NaN mixed with -inf.
TEST(Sampler, ArgmaxMatchesPlainScan) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  auto plain = [](const std::vector<float>& v) {
    size_t best = 0;
    while (best < v.size() && std::isnan(v[best])) ++best;
    if (best == v.size()) return size_t{0};
    for (size_t i = best + 1; i < v.size(); ++i)
      if (v[i] > v[best]) best = i;
    return best;
  };
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{15}, size_t{16}, size_t{17}, size_t{33},
                   size_t{1000}, size_t{129280}}) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    EXPECT_EQ(static_cast<size_t>(argmax(v)), plain(v)) << n;
    v[n - 1] = 100.0f;  // the maximum in the tail
    EXPECT_EQ(static_cast<size_t>(argmax(v)), n - 1) << n;
    if (n > 4) {
      v[n / 2] = 100.0f;  // a tie: the first wins
      v[0] = NAN;
      EXPECT_EQ(static_cast<size_t>(argmax(v)), n / 2) << n;
    }
  }
  const std::vector<float> inf(20, -INFINITY);
  EXPECT_EQ(argmax(inf), 0);
  std::vector<float> mix(40, NAN);
  mix[21] = mix[37] = -INFINITY;
  EXPECT_EQ(argmax(mix), 21);
  EXPECT_EQ(argmax(std::vector<float>(5, NAN)), 0);
  // Lane 1 sees the maximum first at index 17, lane 3 at index 3: index 3 is the answer.
  std::vector<float> lanes(64, 0.0f);
  lanes[17] = lanes[3] = lanes[50] = 9.0f;
  EXPECT_EQ(argmax(lanes), 3);
  lanes[3] = 8.0f;
  EXPECT_EQ(argmax(lanes), 17);
}

TEST(Sampler, SeedReproducesAndDistributionFollowsSoftmax) {
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_p = 1.0f;
  o.seed = 42;
  std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler a(o), b(o);
  std::map<int, int> counts;
  for (int i = 0; i < 20000; ++i) {
    int x = a.sample(l);
    ASSERT_EQ(x, b.sample(l));
    counts[x]++;
  }
  EXPECT_NEAR(counts[0] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(counts[2] / 20000.0, 0.2, 0.02);
}

TEST(Sampler, TopPKeepsSmallestNucleus) {
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.7f;  // 0.5 + 0.3 reaches 0.7: token 2 (0.2) is never drawn
  std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s(o);
  for (int i = 0; i < 5000; ++i) ASSERT_NE(s.sample(l), 2);
}

// The nucleus on a large, nearly flat distribution (a random-weight model's: most of the vocabulary
// is needed to reach top_p) is the sorted definition's set: the smallest most-likely prefix.
TEST(Sampler, TopPNucleusOfAFlatDistributionIsTheSortedPrefix) {
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  const size_t V = 20000;
  std::vector<float> l(V);
  for (auto& v : l) v = noise(rng);
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.9f;
  // The definition: sort by probability (then id), keep the shortest prefix reaching 0.9 of the mass.
  float mx = *std::max_element(l.begin(), l.end());
  std::vector<std::pair<float, int32_t>> p(V);
  double total = 0;
  for (size_t i = 0; i < V; ++i) total += (p[i] = {std::exp(l[i] - mx), static_cast<int32_t>(i)}).first;
  std::sort(p.begin(), p.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<char> kept(V, 0);
  double acc = 0;
  size_t k = 0;
  for (; k < V; ++k) {
    kept[static_cast<size_t>(p[k].second)] = 1;
    if ((acc += p[k].first) >= 0.9 * total) break;
  }
  ASSERT_LT(k + 100, V);  // a nucleus, not everything
  // 10% of the mass lies outside: a sampler that kept too much would draw there ~200 times.
  Sampler s(o);
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(kept[static_cast<size_t>(s.sample(l))]);
}

TEST(Sampler, MinPAndTopK) {
  std::vector<float> l{std::log(0.6f), std::log(0.25f), std::log(0.1f), std::log(0.05f)};
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_p = 1.0f;
  o.min_p = 0.2f;  // drops p < 0.12: tokens 2 and 3
  Sampler s(o);
  for (int i = 0; i < 5000; ++i) ASSERT_LT(s.sample(l), 2);
  SamplerOptions k;
  k.temperature = 1.0f;
  k.top_p = 1.0f;
  k.top_k = 1;
  Sampler sk(k);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(sk.sample(l), 0);
}

TEST(Sampler, OptionsValidated) {
  SamplerOptions o;
  o.top_p = 0;
  EXPECT_EQ(o.validate().code(), StatusCode::kInvalidArgument);
  o.top_p = 1;
  o.temperature = -1;
  EXPECT_NE(o.validate().message().find("temperature"), std::string::npos);
  o.temperature = 1;
  o.min_p = 1.0f;
  EXPECT_FALSE(o.validate().ok());
}

// OpenAI penalties: logit -= frequency * count + presence, for tokens generated at least once.
TEST(Penalties, FrequencyTimesCountPlusPresence) {
  const std::vector<float> logits{1, 1, 1, 1};
  const std::vector<int32_t> generated{2, 2, 3, 99};  // 99 is outside the row: ignored
  std::vector<float> out;
  apply_penalties(logits, generated, 0.5f, 0.25f, &out);
  EXPECT_EQ(out, (std::vector<float>{1, 1, 0, 0.25f}));
  apply_penalties(logits, {}, 0.5f, 0.25f, &out);
  EXPECT_EQ(out, logits);
}

}  // namespace
}  // namespace strata::runtime
