// Session over the v41-tiny checkpoint: chunks at absolute positions (so how a history was split
// into appends does not change the numbers), boundary callbacks, replay mode, copies as
// independent snapshots, and a generation continued from a session equal to an uninterrupted one.
#include "tests/support/forward_one.h"
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/generator.h"
#include "tests/support/npy.h"
#include "tests/support/tiny_model.h"
#include "tests/support/tiny_suite.h"

namespace strata::runtime {
namespace {

class SessionTiny : public testing::TinyModelSuite<SessionTiny> {
 protected:
  static bool same(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }
};

TEST_F(SessionTiny, AppendsSplitAnywhereGiveTheSameLogits) {
  AppendOptions o;
  o.chunk = 64;
  Session one(*model_);
  ASSERT_TRUE(one.append(ids_, o).ok());
  std::span<const int32_t> all(ids_);
  Session split(*model_);
  ASSERT_TRUE(split.append(all.subspan(0, 100), o).ok());
  ASSERT_TRUE(split.append(all.subspan(100), o).ok());
  EXPECT_EQ(split.tokens(), one.tokens());
  EXPECT_TRUE(same(split.last_logits(), one.last_logits()));
}

TEST_F(SessionTiny, BoundaryCallbackAtAbsoluteMultiplesOfTheChunk) {
  std::span<const int32_t> all(ids_);
  Session s(*model_);
  ASSERT_TRUE(s.append(all.subspan(0, 10), nullptr).ok());
  std::vector<int64_t> seen;
  AppendOptions o;
  o.chunk = 64;
  o.on_boundary = [&](const Session& x) {
    seen.push_back(x.n_past());
    EXPECT_TRUE(x.last_logits().empty());  // only the append's last chunk computes logits
  };
  ASSERT_TRUE(s.append(all.subspan(10), o).ok());
  EXPECT_EQ(seen, (std::vector<int64_t>{64, 128, 192}));  // not 197: the last chunk is the append's end
  EXPECT_EQ(s.n_past(), 197);
  EXPECT_EQ(s.last_logits().size(), static_cast<size_t>(model_->config().vocab_size));
}

TEST_F(SessionTiny, ReplayModeRunsTheDecoderOverTheTailOnly) {
  AppendOptions o;
  o.mode = PrefillMode::kReplay;
  o.chunk = 64;
  Session r(*model_);
  std::vector<int64_t> seen;
  o.on_boundary = [&](const Session& x) { seen.push_back(x.n_past()); };
  ASSERT_TRUE(r.append(ids_, o).ok());
  EXPECT_TRUE(r.replayed());
  // 197 tokens in chunks of 64: the last chunk [192, 197) is shorter than the window (16), so it
  // merges with the previous one: boundaries at 64 and 128 only.
  EXPECT_EQ(seen, (std::vector<int64_t>{64, 128}));
  // Same as one replayed forward over everything.
  model::KvCache k = model_->new_cache();
  std::vector<float> l(static_cast<size_t>(model_->config().vocab_size));
  ASSERT_TRUE(strata::test::forward_one(*model_, k, ids_, model::LogitsRequest{}, l.data(), nullptr, model_->config().window_size).ok());
  EXPECT_TRUE(same(r.last_logits(), l));
  // A short append in replay mode is exact.
  Session e(*model_), rs(*model_);
  std::span<const int32_t> few(ids_.data(), 12);
  ASSERT_TRUE(e.append(few, nullptr).ok());
  ASSERT_TRUE(rs.append(few, o).ok());
  EXPECT_FALSE(rs.replayed());
  EXPECT_TRUE(same(e.last_logits(), rs.last_logits()));
}

TEST_F(SessionTiny, CopiesAreIndependentSnapshots) {
  std::span<const int32_t> all(ids_);
  Session a(*model_);
  ASSERT_TRUE(a.append(all.subspan(0, 150), nullptr).ok());
  Session snap = a;
  ASSERT_TRUE(a.append(all.subspan(150), nullptr).ok());
  EXPECT_EQ(snap.n_past(), 150);
  ASSERT_TRUE(snap.append(all.subspan(150), nullptr).ok());  // continues as if never copied
  EXPECT_TRUE(same(snap.last_logits(), a.last_logits()));
}

TEST_F(SessionTiny, BadTokenInALaterChunkChangesNothing) {
  std::vector<int32_t> t(ids_.begin(), ids_.begin() + 100);
  t[90] = static_cast<int32_t>(model_->config().vocab_size);
  Session s(*model_);
  Status st = s.append(t, nullptr, 64);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("position 90"), std::string::npos) << st.to_string();
  EXPECT_EQ(s.n_past(), 0);
  EXPECT_TRUE(s.valid());
}

TEST_F(SessionTiny, CancelLeavesAChunkBoundary) {
  std::atomic<bool> cancel{false};
  AppendOptions o;
  o.chunk = 64;
  o.cancel = &cancel;
  o.on_boundary = [&](const Session&) { cancel = true; };
  Session s(*model_);
  Status st = s.append(ids_, o);
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
  EXPECT_EQ(s.n_past(), 64);
  EXPECT_TRUE(s.valid());
  EXPECT_TRUE(s.last_logits().empty());
}

TEST(PrefillMode, Names) {
  EXPECT_EQ(*parse_prefill_mode("exact"), PrefillMode::kExact);
  EXPECT_EQ(*parse_prefill_mode("replay"), PrefillMode::kReplay);
  auto bad = parse_prefill_mode("fast");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("not one of: exact, replay"), std::string::npos);
  EXPECT_EQ(prefill_mode_name(PrefillMode::kReplay), "replay");
}

// A run that stops after k tokens (feeding the last one) and is continued from its session
// produces the same greedy tokens and logits as one uninterrupted run.
TEST_F(SessionTiny, ContinuedGenerationEqualsUninterrupted) {
  GenerateOptions o;
  o.sampler.temperature = 0;
  o.max_new_tokens = 12;
  std::vector<int32_t> want;
  Generator full(*model_);
  ASSERT_TRUE(full.generate(ids_, o, [&](int32_t t) { want.push_back(t); return true; }, nullptr).ok());

  std::vector<int32_t> got;
  Generator first(*model_);
  GenerateOptions a = o;
  a.max_new_tokens = 5;
  a.consume_last = true;
  ASSERT_TRUE(first.generate(ids_, a, [&](int32_t t) { got.push_back(t); return true; }, nullptr).ok());
  EXPECT_EQ(first.session().n_past(), static_cast<int64_t>(ids_.size()) + 5);
  Generator second(*model_);
  second.session() = first.session();
  GenerateOptions b = o;
  b.max_new_tokens = 7;
  GenerateStats st;
  ASSERT_TRUE(second.generate({}, b, [&](int32_t t) { got.push_back(t); return true; }, &st).ok());
  EXPECT_EQ(st.prompt_tokens, 0);
  EXPECT_EQ(got, want);
  // And the caches end identical to the uninterrupted run's after the same tokens.
  EXPECT_EQ(second.session().tokens(), full.session().tokens());
  EXPECT_TRUE(same(second.session().last_logits(), full.session().last_logits()));
}

TEST_F(SessionTiny, EmptyPromptNeedsLogits) {
  Generator g(*model_);
  Status s = g.generate({}, GenerateOptions{}, [](int32_t) { return true; }, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::runtime
