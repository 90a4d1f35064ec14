// runtime/logprobs.h: log-softmax at the sampler's temperature against a direct computation, the
// top alternatives (sorted, ties by id, clamped count), greedy reported at T = 1; and through the
// engine (runtime/engine.h): every report names the token handed out, greedy's token is the top-1
// alternative, and with logprobs off no report is made.
#include "runtime/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/engine.h"
#include "tests/support/tiny_suite.h"

namespace strata::runtime {
namespace {

// log(softmax(logits / t))[i], computed directly in double.
double reference(const std::vector<float>& logits, double t, size_t i) {
  double z = 0;
  for (float l : logits) z += std::exp(l / t);
  return logits[i] / t - std::log(z);
}

// Break-in finding 3: under a grammar's mask (-infinity logits) the alternatives are only allowed
// tokens, fewer than asked when fewer are allowed, and none has a -infinity logprob.
TEST(TokenLogprob, MaskedTokensAreNeverAlternatives) {
  const std::vector<float> logits = {-INFINITY, 2.0f, -INFINITY, 1.0f, -INFINITY};
  TokenLogprob lp;
  token_logprob(logits, 1.0f, 1, 5, &lp);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  for (const auto& [id, l] : lp.top) EXPECT_TRUE(std::isfinite(l)) << id;
}

TEST(TokenLogprob, LogSoftmaxAtTemperature) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  TokenLogprob lp;
  for (const float t : {1.0f, 0.5f, 1.7f}) {
    token_logprob(logits, t, 4, 3, &lp);
    EXPECT_EQ(lp.id, 4);
    EXPECT_NEAR(lp.logprob, reference(logits, t, 4), 1e-5) << "t " << t;
    ASSERT_EQ(lp.top.size(), 3u);
    // Most likely first, the lower id first on a tie.
    EXPECT_EQ(lp.top[0].first, 1);
    EXPECT_EQ(lp.top[1].first, 3);
    EXPECT_EQ(lp.top[2].first, 0);
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.top[1].second);
    EXPECT_NEAR(lp.top[2].second, reference(logits, t, 0), 1e-5);
  }
  // Greedy (T = 0) is reported at T = 1.
  token_logprob(logits, 0.0f, 1, 0, &lp);
  EXPECT_NEAR(lp.logprob, reference(logits, 1.0, 1), 1e-5);
  EXPECT_TRUE(lp.top.empty());
  // More alternatives than tokens, or than the limit: clamped.
  token_logprob(logits, 1.0f, 0, 50, &lp);
  EXPECT_EQ(lp.top.size(), logits.size());
  double mass = 0;
  for (const auto& [id, l] : lp.top) mass += std::exp(l);
  EXPECT_NEAR(mass, 1.0, 1e-5);
  std::vector<float> wide(1000);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = std::sin(static_cast<float>(i));
  token_logprob(wide, 1.0f, 7, 50, &lp);
  EXPECT_EQ(lp.top.size(), static_cast<size_t>(kMaxTopLogprobs));
  for (size_t i = 1; i < lp.top.size(); ++i) EXPECT_GE(lp.top[i - 1].second, lp.top[i].second);
  for (const auto& [id, l] : lp.top) EXPECT_LE(l, 0.0f);
}

class LogprobsTiny : public testing::TinyModelSuite<LogprobsTiny> {
 protected:
  // Generates `n` tokens of the fixture prompt; returns the tokens and the reports.
  static void generate(SequenceOptions o, int64_t n, std::vector<int32_t>* tokens, std::vector<TokenLogprob>* reports) {
    Engine e(*model_, EngineOptions{});
    Session s(*model_);
    o.max_new_tokens = n;
    bool done = false;
    SequenceCallbacks cb;
    cb.on_token = [&](int32_t t) {
      tokens->push_back(t);
      EXPECT_EQ(reports->size(), o.logprobs >= 0 ? tokens->size() : 0u) << "a report comes just before its token";
      return true;
    };
    cb.on_logprob = [&](const TokenLogprob& lp) { reports->push_back(lp); };
    cb.on_finish = [&](FinishReason, const Status& st, const SequenceStats&) {
      EXPECT_TRUE(st.ok()) << st.to_string();
      done = true;
    };
    std::vector<int32_t> p(ids_.begin(), ids_.begin() + 24);
    ASSERT_TRUE(e.add(&s, p, o, std::move(cb)).ok());
    while (!done) e.step();
  }
};

TEST_F(LogprobsTiny, EngineReportsTheTokensItHandsOut) {
  SequenceOptions greedy;
  greedy.sampler.temperature = 0;
  greedy.logprobs = 5;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> reports;
  generate(greedy, 8, &tokens, &reports);
  ASSERT_EQ(reports.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(reports[i].id, tokens[i]);
    EXPECT_LE(reports[i].logprob, 0.0f);
    ASSERT_EQ(reports[i].top.size(), 5u);
    EXPECT_EQ(reports[i].top[0].first, tokens[i]) << "greedy's token is the top-1 alternative";
    EXPECT_FLOAT_EQ(reports[i].top[0].second, reports[i].logprob);
    for (size_t k = 1; k < 5; ++k) EXPECT_GE(reports[i].top[k - 1].second, reports[i].top[k].second);
  }
  // Sampling at a temperature: the reported logprob is the token's entry among the alternatives
  // whenever it is one of them, and reports do not change what is sampled.
  SequenceOptions hot;
  hot.sampler.temperature = 0.8f;
  hot.sampler.top_p = 1.0f;
  hot.sampler.seed = 7;
  hot.logprobs = kMaxTopLogprobs;
  std::vector<int32_t> hot_tokens, plain_tokens;
  reports.clear();
  generate(hot, 8, &hot_tokens, &reports);
  for (size_t i = 0; i < hot_tokens.size(); ++i) {
    EXPECT_EQ(reports[i].id, hot_tokens[i]);
    for (const auto& [id, l] : reports[i].top) {
      if (id == hot_tokens[i]) {
        EXPECT_FLOAT_EQ(l, reports[i].logprob);
      }
    }
  }
  SequenceOptions off = hot;
  off.logprobs = -1;
  std::vector<TokenLogprob> none;
  generate(off, 8, &plain_tokens, &none);
  EXPECT_EQ(plain_tokens, hot_tokens);
  EXPECT_TRUE(none.empty()) << "logprobs off: no report";
}

TEST(SequenceOptionsLogprobs, Validated) {
  SequenceOptions o;
  o.logprobs = kMaxTopLogprobs + 1;
  EXPECT_FALSE(o.validate().ok());
  o.logprobs = -2;
  EXPECT_FALSE(o.validate().ok());
  o.logprobs = 0;
  EXPECT_TRUE(o.validate().ok());
}

}  // namespace
}  // namespace strata::runtime
