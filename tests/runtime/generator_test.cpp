// Generator over the v41-tiny checkpoint: greedy generation equals the fixture's tokens, and bad
// requests (empty prompt, prompt beyond the context limit) fail before any work.
#include "runtime/generator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/npy.h"
#include "tests/support/tiny_model.h"

namespace strata::runtime {
namespace {

class GeneratorTiny : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_REQUIRE_FIXTURE(testing::tiny_dir() + "/tokens.json");
    auto m = testing::load_model(testing::tiny_dir() + "/checkpoint");
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = std::move(*m);
    std::ifstream f(testing::tiny_dir() + "/tokens.json");
    std::stringstream ss;
    ss << f.rdbuf();
    ids_ = nlohmann::json::parse(ss.str())["ids"].get<std::vector<int32_t>>();
  }
  std::unique_ptr<model::Model> model_;
  std::vector<int32_t> ids_;
};

TEST_F(GeneratorTiny, GreedyGenerationMatchesFixture) {
  testing::Npy gold;
  std::string err;
  ASSERT_TRUE(testing::read_npy(testing::tiny_dir() + "/golden/decode_tokens_fixed.npy", &gold, &err)) << err;
  auto want = gold.as<int64_t>();
  Generator g(*model_);
  GenerateOptions o;
  o.max_new_tokens = static_cast<int>(want.size());
  o.sampler.temperature = 0;
  o.prefill_chunk = 64;  // chunked prefill must not change the result
  std::vector<int32_t> got;
  GenerateStats st;
  ASSERT_TRUE(g.generate(ids_, o, [&](int32_t t) { got.push_back(t); return true; }, &st).ok());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "token " << i;
  EXPECT_EQ(st.prompt_tokens, 197);
  EXPECT_EQ(st.prefilled_tokens, 197);
  EXPECT_EQ(st.generated_tokens, static_cast<int64_t>(want.size()));
  EXPECT_GT(st.prefill_tok_per_s(), 0);
}

// The cancel hook (issue #13 item 10: Ctrl-C in `strata run`): read between tokens, so the token
// being emitted when it fires is the last; consume_last still feeds it, so the session can be saved.
TEST_F(GeneratorTiny, CancelStopsAfterTheCurrentToken) {
  Generator g(*model_);
  GenerateOptions o;
  o.max_new_tokens = 50;
  o.sampler.temperature = 0;
  o.consume_last = true;
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  std::vector<int32_t> got;
  GenerateStats st;
  Status s = g.generate(ids_, o, [&](int32_t t) {
    got.push_back(t);
    if (got.size() == 3) cancel.store(true);  // as a signal handler would, between two tokens
    return true;
  }, &st);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(got.size(), 4u);  // the flag is read before the 4th token is handed out
  EXPECT_TRUE(st.cancelled);
  EXPECT_FALSE(st.stopped_by_eos);
  EXPECT_EQ(st.generated_tokens, 4);
  EXPECT_EQ(g.session().n_past(), static_cast<int64_t>(ids_.size()) + 4);  // the last token consumed
  EXPECT_FALSE(g.session().last_logits().empty());
}

TEST_F(GeneratorTiny, CancelDuringPrefillStopsAtAChunkBoundary) {
  Generator g(*model_);
  GenerateOptions o;
  o.prefill_chunk = 64;
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  int64_t chunks = 0;
  o.prefill_progress = [&](const ProgressEvent&) {
    if (++chunks == 1) cancel.store(true);
  };
  GenerateStats st;
  Status s = g.generate(ids_, o, [](int32_t) { return true; }, &st);
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.to_string();
  EXPECT_TRUE(st.cancelled);
  EXPECT_EQ(st.generated_tokens, 0);
  EXPECT_LT(g.session().n_past(), static_cast<int64_t>(ids_.size()));
  EXPECT_EQ(g.session().n_past() % 64, 0);  // a chunk boundary
  // The stats count the chunks that ran, not the whole prompt (a rate over them, not a made-up one).
  EXPECT_EQ(st.prompt_tokens, static_cast<int64_t>(ids_.size()));
  EXPECT_EQ(st.prefilled_tokens, g.session().n_past());
  EXPECT_GT(st.prefill_s, 0);
  EXPECT_DOUBLE_EQ(st.prefill_tok_per_s(), static_cast<double>(st.prefilled_tokens) / st.prefill_s);
}

TEST_F(GeneratorTiny, EmptyPromptIsRejected) {
  Generator g(*model_);
  Status s = g.generate({}, GenerateOptions{}, [](int32_t) { return true; }, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("empty prompt"), std::string::npos);
}

TEST_F(GeneratorTiny, PromptLongerThanContextIsRejected) {
  Generator g(*model_);
  GenerateOptions o;
  o.max_context = 100;
  Status s = g.generate(ids_, o, [](int32_t) { return true; }, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("exceeds the context limit of 100 tokens"), std::string::npos) << s.to_string();
  EXPECT_EQ(g.cache().n_past, 0);  // nothing ran
}

TEST_F(GeneratorTiny, CallbackCanStop) {
  Generator g(*model_);
  GenerateOptions o;
  o.sampler.temperature = 0;
  int n = 0;
  ASSERT_TRUE(g.generate(ids_, o, [&](int32_t) { return ++n < 3; }, nullptr).ok());
  EXPECT_EQ(n, 3);
}

}  // namespace
}  // namespace strata::runtime
