#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
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

}  // namespace
}  // namespace strata::runtime
