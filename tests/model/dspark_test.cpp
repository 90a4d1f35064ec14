// The DSpark draft against DeepSeek's official forward_spec (../shared/fixtures/v41-tiny): the
// main_hidden features of the prefill, then after each of the 24 greedy decode steps the draft ids
// (exact), confidence logits and, for the first two steps, the draft logits (fixtures README
// tolerances; the *_fixed decode target). Plus strata's own invariants and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "tests/support/forward_one.h"
#include "runtime/sampler.h"
#include "tests/support/npy.h"
#include "tests/support/tiny_suite.h"

namespace strata::model {
namespace {

constexpr double kLogitAbs = 1e-3, kLogitRel = 1e-3;  // fixtures README: logits (and confidences)
constexpr double kInterAbs = 1e-4, kInterRel = 1e-4;  // intermediates

testing::Npy golden(const std::string& name) {
  testing::Npy n;
  std::string err;
  EXPECT_TRUE(testing::read_npy(testing::tiny_dir() + "/golden/" + name, &n, &err)) << err;
  return n;
}

// Index of the first element of got outside abs + rel*|ref|, or -1.
int64_t first_outside(const std::vector<float>& got, const std::vector<double>& ref, size_t off, double abs_tol,
                      double rel_tol) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = ref[off + i];
    if (!(std::fabs(got[i] - r) <= abs_tol + rel_tol * std::fabs(r))) return static_cast<int64_t>(i);
  }
  return -1;
}

class DSparkTiny : public testing::TinyModelSuite<DSparkTiny> {
 protected:
  // Made in SetUp, after the suite's skip: with the fixture missing model_ is null, and a member
  // initialiser calling it crashed the executable instead of skipping its cases.
  std::optional<model::Activations> acts_;
  void SetUp() override {
    TinyModelSuite::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    acts_.emplace(model_->new_activations());
  }
  model::Activations& act() { return *acts_; }
  // Prefill of the fixture prompt (in chunks of `chunk`), seeding the draft after each chunk.
  void prefill(KvCache* cache, DSparkState* st, std::vector<float>* last_logits, std::vector<float>* hidden_all,
               int64_t chunk) {
    const int64_t n = static_cast<int64_t>(ids_.size());
    std::vector<float> mh;
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t m = std::min(chunk, n - s);
      std::span<const int32_t> part(ids_.data() + s, static_cast<size_t>(m));
      ASSERT_TRUE(strata::test::forward_one(*model_, *cache, part, LogitsRequest{}, last_logits->data(), nullptr, -1, &mh).ok());
      ASSERT_TRUE(model_->dspark_seed(*st, mh.data(), m, s, act()).ok());
      if (hidden_all) hidden_all->insert(hidden_all->end(), mh.begin(), mh.end());
    }
  }
};

TEST_F(DSparkTiny, DraftMatchesOfficialForwardSpec) {
  const ModelConfig& c = model_->config();
  ASSERT_TRUE(model_->has_dspark());
  const int64_t V = c.vocab_size, B = c.dspark_block_size, n = static_cast<int64_t>(ids_.size());
  KvCache cache = model_->new_cache();
  DSparkState st = model_->new_dspark_state();
  std::vector<float> row(static_cast<size_t>(V)), hidden;
  prefill(&cache, &st, &row, &hidden, n);

  const testing::Npy gh = golden("prefill_main_hidden.npy");
  ASSERT_EQ(static_cast<int64_t>(hidden.size()), gh.numel());
  const int64_t bad_h = first_outside(hidden, gh.to_f64(), 0, kInterAbs, kInterRel);
  EXPECT_EQ(bad_h, -1) << "prefill_main_hidden element " << bad_h;

  const std::vector<int64_t> gids = golden("dspark_draft_ids_fixed.npy").as<int64_t>();
  const std::vector<double> gconf = golden("dspark_confidence_fixed.npy").to_f64();
  const std::vector<double> glog = golden("dspark_draft_logits_first_steps_fixed.npy").to_f64();
  const int64_t steps = static_cast<int64_t>(gids.size()) / (B + 1);
  ASSERT_EQ(steps, 24);
  std::vector<float> mh;
  int32_t tok = runtime::argmax(row);
  for (int64_t k = 0; k < steps; ++k) {
    const int32_t t[1] = {tok};
    ASSERT_TRUE(strata::test::forward_one(*model_, cache, t, LogitsRequest{}, row.data(), nullptr, -1, &mh).ok());
    tok = runtime::argmax(row);
    auto d = model_->dspark_draft(st, tok, mh.data(), n + k, act());
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    for (int64_t j = 0; j <= B; ++j)
      EXPECT_EQ(d->ids[static_cast<size_t>(j)], gids[static_cast<size_t>(k * (B + 1) + j)]) << "step " << k << " id " << j;
    const int64_t bad_c = first_outside(d->confidence, gconf, static_cast<size_t>(k * B), kLogitAbs, kLogitRel);
    EXPECT_EQ(bad_c, -1) << "step " << k << " confidence " << bad_c << ": " << d->confidence[std::max<int64_t>(bad_c, 0)];
    if (k < 2) {
      ASSERT_EQ(static_cast<int64_t>(d->logits.size()), B * V);
      const int64_t bad_l = first_outside(d->logits, glog, static_cast<size_t>(k * B * V), kLogitAbs, kLogitRel);
      EXPECT_EQ(bad_l, -1) << "step " << k << " draft logit " << bad_l;
    }
  }
}

// Chunked prefill seeds the same rings as one prefill: the drafts after it are bit for bit equal.
TEST_F(DSparkTiny, ChunkedPrefillSeedsTheSameDraft) {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(ids_.size());
  std::vector<DSparkDraft> drafts;
  for (int64_t chunk : {n, int64_t{37}}) {
    KvCache cache = model_->new_cache();
    DSparkState st = model_->new_dspark_state();
    std::vector<float> row(static_cast<size_t>(c.vocab_size)), mh;
    prefill(&cache, &st, &row, nullptr, chunk);
    const int32_t t[1] = {runtime::argmax(row)};
    ASSERT_TRUE(strata::test::forward_one(*model_, cache, t, LogitsRequest{}, row.data(), nullptr, -1, &mh).ok());
    auto d = model_->dspark_draft(st, runtime::argmax(row), mh.data(), n, act());
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    drafts.push_back(*d);
  }
  EXPECT_EQ(drafts[0].ids, drafts[1].ids);
  EXPECT_EQ(drafts[0].confidence, drafts[1].confidence);
  EXPECT_EQ(drafts[0].logits, drafts[1].logits);
}

// Bounded-replay prefill hands back features of the replayed tail only; seeding from there works.
// A target at the CED boundary reads what the encoder computed for every token, so its features
// for the tail equal the exact prefill's; the later targets' differ (replay's approximation).
TEST_F(DSparkTiny, ReplayPrefillSeedsFromItsTail) {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(ids_.size()), tail = c.window_size;
  auto boundary = model_->decoder_boundary();
  ASSERT_TRUE(boundary.ok());
  ASSERT_EQ(c.dspark_target_layer_ids.front(), *boundary) << "the fixture's first target is the boundary layer";
  KvCache cache = model_->new_cache(), exact_cache = model_->new_cache();
  DSparkState st = model_->new_dspark_state();
  std::vector<float> row(static_cast<size_t>(c.vocab_size)), mh, exact;
  ASSERT_TRUE(strata::test::forward_one(*model_, exact_cache, ids_, LogitsRequest{}, row.data(), nullptr, -1, &exact).ok());
  ASSERT_TRUE(strata::test::forward_one(*model_, cache, ids_, LogitsRequest{}, row.data(), nullptr, tail, &mh).ok());
  const int64_t width = c.dim * static_cast<int64_t>(c.dspark_target_layer_ids.size());
  ASSERT_EQ(static_cast<int64_t>(mh.size()), tail * width);
  for (int64_t t = 0; t < tail; ++t) {
    const float* got = mh.data() + t * width;
    const float* want = exact.data() + (n - tail + t) * width;
    EXPECT_TRUE(std::equal(got, got + c.dim, want)) << "boundary target features of tail row " << t;
  }
  EXPECT_FALSE(std::equal(mh.begin() + c.dim, mh.begin() + width, exact.begin() + (n - tail) * width + c.dim))
      << "later targets run the decoder over the tail only: their features differ from the exact prefill's";
  ASSERT_TRUE(model_->dspark_seed(st, mh.data(), tail, n - tail, act()).ok());
  const int32_t t[1] = {runtime::argmax(row)};
  ASSERT_TRUE(strata::test::forward_one(*model_, cache, t, LogitsRequest{}, row.data(), nullptr, -1, &mh).ok());
  auto d = model_->dspark_draft(st, runtime::argmax(row), mh.data(), n, act());
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->ids[0], runtime::argmax(row));
  for (int32_t id : d->ids) EXPECT_TRUE(id >= 0 && id < c.vocab_size);
}

// After a seeding gap the rings still hold entries from before it; a draft must leave those out
// (they are outside its window), exactly as if they had never been written.
TEST_F(DSparkTiny, SeedingGapLeavesOldEntriesOut) {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(ids_.size()), width = c.dim * static_cast<int64_t>(c.dspark_target_layer_ids.size());
  KvCache cache = model_->new_cache();
  std::vector<float> row(static_cast<size_t>(c.vocab_size)), mh;
  ASSERT_TRUE(strata::test::forward_one(*model_, cache, ids_, LogitsRequest{}, row.data(), nullptr, -1, &mh).ok());
  ASSERT_GT(n, 120);
  DSparkState gap = model_->new_dspark_state(), fresh = model_->new_dspark_state();
  ASSERT_TRUE(model_->dspark_seed(gap, mh.data(), 10, 0, act()).ok());  // positions 0..9, long before the window
  ASSERT_TRUE(model_->dspark_seed(gap, mh.data() + 100 * width, 1, 100, act()).ok());
  ASSERT_TRUE(model_->dspark_seed(fresh, mh.data() + 100 * width, 1, 100, act()).ok());
  const ForwardProfile before = act().profile;
  auto a = model_->dspark_draft(gap, 7, mh.data() + 101 * width, 101, act());
  auto b = model_->dspark_draft(fresh, 7, mh.data() + 101 * width, 101, act());
  ASSERT_TRUE(a.ok() && b.ok());
  // Draft time is the draft's own: the main forward's sublayer counters do not move.
  const ForwardProfile spent = act().profile.since(before);
  EXPECT_EQ(spent.attention_ns, 0u);
  EXPECT_EQ(spent.moe_ns, 0u);
  EXPECT_EQ(spent.forward_ns, 0u);
  EXPECT_GT(spent.dspark_ns, 0u);
  EXPECT_EQ(a->ids, b->ids);
  EXPECT_EQ(a->confidence, b->confidence);
  EXPECT_EQ(a->logits, b->logits);
}

// The speculative-decoding head (DSparkStop): stopping by count or confidence keeps exactly the
// full draft's first drafts, up to the first whose confidence is below the threshold.
TEST_F(DSparkTiny, EarlyStopKeepsTheFullDraftsPrefix) {
  const ModelConfig& c = model_->config();
  const int64_t width = c.dim * static_cast<int64_t>(c.dspark_target_layer_ids.size()), B = c.dspark_block_size;
  KvCache cache = model_->new_cache();
  std::vector<float> row(static_cast<size_t>(c.vocab_size)), mh;
  ASSERT_TRUE(strata::test::forward_one(*model_, cache, ids_, LogitsRequest{}, row.data(), nullptr, -1, &mh).ok());
  const int64_t pos = 150;
  DSparkState seeded = model_->new_dspark_state();
  ASSERT_TRUE(model_->dspark_seed(seeded, mh.data(), pos, 0, act()).ok());
  DSparkState st = seeded;
  auto full = model_->dspark_draft(st, 11, mh.data() + pos * width, pos, act());
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(static_cast<int64_t>(full->ids.size()), B + 1);
  int checked_stop = 0;
  for (int64_t max = 0; max <= B; ++max)
    for (float conf : {0.0f, 0.3f, 0.5f, 0.6f, 0.7f, 0.9f}) {
      SCOPED_TRACE("max " + std::to_string(max) + " min_conf " + std::to_string(conf));
      st = seeded;
      auto d = model_->dspark_draft(st, 11, mh.data() + pos * width, pos, act(), DSparkStop{max, conf});
      ASSERT_TRUE(d.ok());
      int64_t want = 0;  // drafts kept: up to max, before the first below conf
      while (want < max && 1.0f / (1.0f + std::exp(-full->confidence[static_cast<size_t>(want)])) >= conf) ++want;
      checked_stop += want < max;
      ASSERT_EQ(static_cast<int64_t>(d->ids.size()), want + 1);
      for (int64_t i = 0; i <= want; ++i) EXPECT_EQ(d->ids[static_cast<size_t>(i)], full->ids[static_cast<size_t>(i)]);
      for (size_t i = 0; i < d->confidence.size(); ++i) EXPECT_EQ(d->confidence[i], full->confidence[i]);
      EXPECT_EQ(static_cast<int64_t>(d->logits.size()), want * c.vocab_size);
    }
  EXPECT_GT(checked_stop, 0);  // some thresholds stopped the head on a confidence
}

TEST_F(DSparkTiny, OutOfOrderPositionsAndBadTokensAreRejected) {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(ids_.size());
  KvCache cache = model_->new_cache();
  DSparkState st = model_->new_dspark_state();
  std::vector<float> row(static_cast<size_t>(c.vocab_size)), mh;
  ASSERT_TRUE(strata::test::forward_one(*model_, cache, ids_, LogitsRequest{}, row.data(), nullptr, -1, &mh).ok());
  ASSERT_TRUE(model_->dspark_seed(st, mh.data(), n, 0, act()).ok());
  // Seeding again over positions the rings hold, drafting at a position that is not the next one,
  // a token outside the vocabulary, a state of another shape: errors, and the state is unchanged.
  EXPECT_EQ(model_->dspark_seed(st, mh.data(), n, 0, act()).code(), StatusCode::kInvalidArgument);
  const float* last = mh.data() + (n - 1) * c.dim * static_cast<int64_t>(c.dspark_target_layer_ids.size());
  EXPECT_EQ(model_->dspark_draft(st, 5, last, n + 3, act()).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->dspark_draft(st, static_cast<int32_t>(c.vocab_size), last, n, act()).error().code(), StatusCode::kInvalidArgument);
  DSparkState other;
  EXPECT_EQ(model_->dspark_draft(other, 5, last, n, act()).error().code(), StatusCode::kInvalidArgument);
  DSparkState unseeded = model_->new_dspark_state();
  auto r = model_->dspark_draft(unseeded, 5, last, 1, act());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("dspark_seed"), std::string::npos) << r.error().to_string();
  const Status zero = model_->dspark_seed(unseeded, mh.data(), 0, 0, act());
  EXPECT_NE(zero.message().find("at least one position"), std::string::npos) << zero.to_string();
  EXPECT_EQ(st.n_seen, n);
  EXPECT_TRUE(model_->dspark_draft(st, 5, last, n, act()).ok());
  EXPECT_EQ(st.n_seen, n + 1);
}

}  // namespace
}  // namespace strata::model
