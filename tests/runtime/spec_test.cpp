// Speculative decoding in the generation loop (runtime/engine.h, runtime/speculation.h; issue 17)
// over the v41-tiny checkpoint: greedy output with --spec dspark is token for token that of plain
// decoding for every draft count; drafts that are accepted, partly accepted and rejected (an oracle
// drafter built from the plain answer) give the same tokens, and the session ends byte for byte as
// the plain run's (caches, tokens, last logits), also when a stop id or max tokens lands inside a
// cycle with consume_last; at temperature > 0 the output distribution is the target's (statistical);
// the guard's decisions on given timings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "runtime/engine.h"
#include "tests/support/tiny_suite.h"

namespace strata::runtime {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  SequenceStats stats;
  FinishReason reason = FinishReason::kLength;
  std::vector<int32_t> session_tokens;
  std::vector<float> last_logits;
  std::vector<uint8_t> ring_bytes;  // every layer's window ring and compressor state, for equality
};

class SpecTiny : public testing::TinyModelSuite<SpecTiny> {
 protected:
  static SequenceOptions greedy(int64_t n) {
    SequenceOptions o;
    o.max_new_tokens = n;
    o.sampler.temperature = 0;
    return o;
  }
  static std::vector<int32_t> prompt(size_t len) { return std::vector<int32_t>(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(len)); }

  static Outcome run(const std::vector<int32_t>& p, const SequenceOptions& o) {
    EngineOptions eo;
    eo.prefill_chunk = 32;
    eo.batch_tokens = 32;
    Engine e(*model_, eo);
    Session s(*model_);
    Outcome r;
    bool done = false;
    SequenceCallbacks cb;
    cb.on_token = [&](int32_t t) {
      r.tokens.push_back(t);
      return true;
    };
    cb.on_finish = [&](FinishReason why, const Status& st, const SequenceStats& ss) {
      EXPECT_TRUE(st.ok()) << st.to_string();
      r.reason = why;
      r.stats = ss;
      done = true;
    };
    EXPECT_TRUE(e.add(&s, p, o, std::move(cb)).ok());
    while (!done) e.step();
    r.session_tokens = s.tokens();
    r.last_logits.assign(s.last_logits().begin(), s.last_logits().end());
    for (const model::LayerKvCache& lc : s.cache().layers) {
      r.ring_bytes.insert(r.ring_bytes.end(), lc.window.begin(), lc.window.end());
      const auto* pos = reinterpret_cast<const uint8_t*>(lc.window_pos.data());
      r.ring_bytes.insert(r.ring_bytes.end(), pos, pos + lc.window_pos.size() * sizeof(int64_t));
      const auto* kv = reinterpret_cast<const uint8_t*>(lc.kv_state.data());
      r.ring_bytes.insert(r.ring_bytes.end(), kv, kv + lc.kv_state.size() * sizeof(float));
      for (int64_t g = 0; g < lc.compressed.size(); ++g)
        r.ring_bytes.insert(r.ring_bytes.end(), lc.compressed.row(g), lc.compressed.row(g) + lc.compressed.row_bytes());
      for (int64_t g = 0; g < lc.index_keys.size(); ++g)
        r.ring_bytes.insert(r.ring_bytes.end(), lc.index_keys.row(g), lc.index_keys.row(g) + lc.index_keys.row_bytes());
    }
    return r;
  }
  static void expect_same_session(const Outcome& a, const Outcome& b) {
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.reason, b.reason);
    EXPECT_EQ(a.session_tokens, b.session_tokens);
    EXPECT_EQ(a.last_logits.size(), b.last_logits.size());
    EXPECT_TRUE(a.last_logits.size() == b.last_logits.size() &&
                std::memcmp(a.last_logits.data(), b.last_logits.data(), a.last_logits.size() * sizeof(float)) == 0);
    EXPECT_TRUE(a.ring_bytes == b.ring_bytes);
  }
};

// Issue 17 acceptance: "greedy output with --spec dspark is token-identical to --spec none (every k)".
TEST_F(SpecTiny, DSparkGreedyEqualsPlainForEveryDraftCount) {
  for (size_t len : {40u, 197u}) {
    const Outcome plain = run(prompt(len), greedy(24));
    ASSERT_EQ(plain.tokens.size(), 24u);
    for (int k = 1; k <= 4; ++k)
      for (float conf : {0.0f, 0.6f}) {
        SCOPED_TRACE("prompt " + std::to_string(len) + " k " + std::to_string(k) + " min-conf " + std::to_string(conf));
        SequenceOptions o = greedy(24);
        o.spec.mode = SpecMode::kDSpark;
        o.spec.max_drafts = k;
        o.spec.min_conf = conf;
        o.spec.guard = false;  // draft at every step, whatever it costs
        const Outcome r = run(prompt(len), o);
        expect_same_session(r, plain);
        EXPECT_TRUE(r.stats.spec.active);
        // min-conf 0 drafts at every step (up to the fixture's block of 3 drafts; fewer near max tokens).
        if (conf == 0.0f) {
          EXPECT_GT(r.stats.spec.cycles, 0);
          EXPECT_LE(r.stats.spec.drafted, r.stats.spec.cycles * std::min(k, 3));
          EXPECT_EQ(r.stats.spec.empty_drafts, 0);
        }
        // Every token but the first (from the prefill) comes from a cycle or a plain step.
        EXPECT_EQ(r.stats.spec.cycle_tokens + r.stats.spec.plain_steps + 1, 24);
      }
  }
}

// An oracle drafter: the plain answer, with a wrong token after `good[c]` right ones at cycle c.
// Exercises every acceptance count, including all drafts accepted.
TEST_F(SpecTiny, AcceptedAndRejectedDraftsGiveThePlainTokens) {
  const std::vector<int32_t> p = prompt(60);
  const Outcome plain = run(p, greedy(30));
  ASSERT_EQ(plain.tokens.size(), 30u);
  const int32_t wrong = 7;  // never the fixture's greedy pick here (checked below)
  for (int32_t t : plain.tokens) ASSERT_NE(t, wrong);
  for (int k = 1; k <= 4; ++k) {
    SCOPED_TRACE("k " + std::to_string(k));
    int cycle = 0;
    SequenceOptions o = greedy(30);
    o.spec.mode = SpecMode::kDSpark;
    o.spec.max_drafts = k;
    o.spec.guard = false;
    o.spec.test_drafts = [&](std::span<const int32_t> gen, int max) {
      const int good = cycle++ % (max + 1);  // 0 .. max right drafts, then a wrong one
      std::vector<int32_t> d;
      for (int i = 0; i < max; ++i) {
        const size_t at = gen.size() + static_cast<size_t>(i);
        d.push_back(i < good && at < plain.tokens.size() ? plain.tokens[at] : wrong);
      }
      return d;
    };
    const Outcome r = run(p, o);
    expect_same_session(r, plain);
    EXPECT_GT(r.stats.spec.accepted, 0);
    EXPECT_GT(r.stats.spec.tokens_per_cycle(), 1.0);
    EXPECT_EQ(r.stats.spec.cycle_tokens, r.stats.spec.accepted + r.stats.spec.cycles);
  }
}

// A stop id or max tokens inside a cycle, with consume_last (a session saved afterwards continues
// from the last token): the session ends exactly as the plain run's.
TEST_F(SpecTiny, EndsInsideACycleLeaveThePlainSession) {
  const std::vector<int32_t> p = prompt(50);
  const Outcome ref = run(p, greedy(20));
  ASSERT_EQ(ref.tokens.size(), 20u);
  for (bool consume : {false, true})
    for (int stop_at : {5, 9, 13}) {
      SCOPED_TRACE(std::string(consume ? "consume_last" : "") + " stop at " + std::to_string(stop_at));
      SequenceOptions plain_o = greedy(20);
      plain_o.consume_last = consume;
      plain_o.stop_ids = {ref.tokens[static_cast<size_t>(stop_at)]};
      const Outcome plain = run(p, plain_o);
      SequenceOptions o = plain_o;
      o.spec.mode = SpecMode::kDSpark;
      o.spec.max_drafts = 4;
      o.spec.guard = false;
      o.spec.test_drafts = [&](std::span<const int32_t> gen, int max) {
        std::vector<int32_t> d;
        for (int i = 0; i < max && gen.size() + static_cast<size_t>(i) < ref.tokens.size(); ++i)
          d.push_back(ref.tokens[gen.size() + static_cast<size_t>(i)]);
        return d;
      };
      expect_same_session(run(p, o), plain);
      // Max tokens inside a cycle.
      SequenceOptions m = o;
      m.stop_ids.clear();
      m.max_new_tokens = stop_at + 1;
      SequenceOptions mp = plain_o;
      mp.stop_ids.clear();
      mp.max_new_tokens = stop_at + 1;
      expect_same_session(run(p, m), run(p, mp));
    }
}

// Issue 17 acceptance: "the T > 0 distribution test passes". The first three tokens after a short
// prompt at temperature 1.5, top-k 3: the exact joint distribution (27 outcomes) from the model's
// logits, against the tokens of 500 seeds with --spec dspark (tokens 2 and 3 come from one cycle
// verifying two greedy drafts; the least likely outcome expects ~9 draws). Pearson's chi-square
// with 26 degrees of freedom must stay below 75 (p ~ 1e-6 under the exact rule); a rule that
// accepted drafts too often (or never resampled without the draft) lands in the hundreds.
TEST_F(SpecTiny, SampledOutputHasTheTargetDistribution) {
  const std::vector<int32_t> p = prompt(8);
  const int64_t V = model_->config().vocab_size;
  SamplerOptions so;
  so.temperature = 1.5f;
  so.top_k = 3;
  so.top_p = 1.0f;
  // Candidates and probabilities of a logits row (the sampler's: top 3, softmax at T in double).
  auto dist = [&](std::span<const float> l) {
    std::vector<int32_t> ids(static_cast<size_t>(V));
    for (int32_t i = 0; i < V; ++i) ids[static_cast<size_t>(i)] = i;
    std::partial_sort(ids.begin(), ids.begin() + 3, ids.end(), [&](int32_t a, int32_t b) {
      return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)] || (l[static_cast<size_t>(a)] == l[static_cast<size_t>(b)] && a < b);
    });
    ids.resize(3);
    std::vector<double> pr;
    double sum = 0;
    for (int32_t id : ids) {
      pr.push_back(std::exp((static_cast<double>(l[static_cast<size_t>(id)]) - l[static_cast<size_t>(ids[0])]) / so.temperature));
      sum += pr.back();
    }
    for (double& x : pr) x /= sum;
    return std::make_pair(ids, pr);
  };
  // Logits after prompt + extra, the last extra token run as a decode step (as the engine does).
  auto logits_after = [&](const std::vector<int32_t>& extra) {
    Session s(*model_);
    EXPECT_TRUE(s.append(p, nullptr).ok());
    AppendOptions o;
    o.kind = model::RowKind::kDecode;
    for (int32_t t : extra) EXPECT_TRUE(s.append(std::span<const int32_t>(&t, 1), o).ok());
    return std::vector<float>(s.last_logits().begin(), s.last_logits().end());
  };
  std::map<std::vector<int32_t>, double> exact;
  std::map<int32_t, std::vector<int32_t>> greedy_drafts;  // t1 -> the drafts after it
  const auto [c0, p0] = dist(logits_after({}));
  for (size_t a = 0; a < 3; ++a) {
    const std::vector<float> l1 = logits_after({c0[a]});
    const auto [c1, p1] = dist(l1);
    greedy_drafts[c0[a]] = {c1[0], dist(logits_after({c0[a], c1[0]})).first[0]};
    for (size_t b = 0; b < 3; ++b) {
      const auto [c2, p2] = dist(logits_after({c0[a], c1[b]}));
      for (size_t c = 0; c < 3; ++c) exact[{c0[a], c1[b], c2[c]}] = p0[a] * p1[b] * p2[c];
    }
  }
  const int kSeeds = 500;
  std::map<std::vector<int32_t>, int> seen;
  int64_t accepted = 0, drafted = 0;
  // One engine; every seed continues a copy of the prefilled session (its logits give token 1).
  Session prefilled(*model_);
  ASSERT_TRUE(prefilled.append(p, nullptr).ok());
  Engine engine(*model_, EngineOptions{});
  for (int seed = 0; seed < kSeeds; ++seed) {
    SequenceOptions o;
    o.max_new_tokens = 4;  // room for both drafts in the cycle after token 1; tokens 1-3 are counted
    o.sampler = so;
    o.sampler.seed = static_cast<uint64_t>(seed);
    o.spec.mode = SpecMode::kDSpark;
    o.spec.max_drafts = 2;
    o.spec.guard = false;
    o.spec.test_drafts = [&](std::span<const int32_t> gen, int) { return greedy_drafts[gen[0]]; };
    Session s = prefilled;
    std::vector<int32_t> got;
    bool done = false;
    SequenceCallbacks cb;
    cb.on_token = [&](int32_t t) {
      got.push_back(t);
      return true;
    };
    cb.on_finish = [&](FinishReason, const Status& st, const SequenceStats& ss) {
      EXPECT_TRUE(st.ok()) << st.to_string();
      accepted += ss.spec.accepted;
      drafted += ss.spec.drafted;
      done = true;
    };
    ASSERT_TRUE(engine.add(&s, {}, o, std::move(cb)).ok());
    while (!done) engine.step();
    ASSERT_EQ(got.size(), 4u);
    got.resize(3);
    ++seen[got];
  }
  double chi2 = 0;
  for (const auto& [k, pk] : exact) {
    const double e = pk * kSeeds, o = seen.count(k) ? seen[k] : 0;
    chi2 += (o - e) * (o - e) / e;
  }
  int outside = 0;
  for (const auto& [k, n] : seen) outside += exact.count(k) ? 0 : n;
  EXPECT_EQ(outside, 0);  // every output is one of the 27 the filters allow
  EXPECT_LT(chi2, 75.0) << "outcomes seen: " << seen.size();
  // Both paths ran: accepted and rejected drafts.
  EXPECT_GT(accepted, drafted / 10);
  EXPECT_LT(accepted, drafted);
}

TEST(SamplerAgainstDraft, DrawsTheSamplersDistributionWhateverTheDraft) {
  // Five tokens at T = 1 (no filters): p = softmax(l). For a likely draft, an unlikely one and one
  // outside the support (p = 0 after top-k 4), 100000 draws each match p (chi-square, 4 dof < 30).
  const std::vector<float> l = {2.0f, 1.0f, 0.5f, -1.0f, -3.0f};
  SamplerOptions so;
  so.temperature = 1.0f;
  so.top_p = 1.0f;
  so.top_k = 4;
  std::vector<double> pr(5, 0.0);
  double sum = 0;
  for (int i = 0; i < 4; ++i) sum += std::exp(static_cast<double>(l[static_cast<size_t>(i)]) - 2.0);
  for (int i = 0; i < 4; ++i) pr[static_cast<size_t>(i)] = std::exp(static_cast<double>(l[static_cast<size_t>(i)]) - 2.0) / sum;
  for (int32_t draft : {0, 3, 4}) {
    Sampler s(so);
    std::vector<int> n(5, 0);
    const int N = 100000;
    for (int i = 0; i < N; ++i) ++n[static_cast<size_t>(s.sample_against(l, draft))];
    EXPECT_EQ(n[4], 0) << "draft " << draft;
    double chi2 = 0;
    for (int i = 0; i < 4; ++i) chi2 += std::pow(n[static_cast<size_t>(i)] - pr[static_cast<size_t>(i)] * N, 2) / (pr[static_cast<size_t>(i)] * N);
    EXPECT_LT(chi2, 30.0) << "draft " << draft;
  }
  // Greedy: the argmax, whatever the draft.
  SamplerOptions g;
  g.temperature = 0;
  Sampler gs(g);
  EXPECT_EQ(gs.sample_against(l, 3), 0);
}

TEST(SpecOptionsTest, ParseAndValidate) {
  EXPECT_EQ(*parse_spec_mode("dspark"), SpecMode::kDSpark);
  EXPECT_EQ(*parse_spec_mode("none"), SpecMode::kNone);
  EXPECT_EQ(*parse_spec_mode("draft"), SpecMode::kDraft);
  EXPECT_EQ(parse_spec_mode("mtp").status().code(), StatusCode::kInvalidArgument);
  SpecOptions o;
  EXPECT_TRUE(o.validate().ok());
  o.max_drafts = 0;
  EXPECT_FALSE(o.validate().ok());
  o.max_drafts = 2;
  o.min_conf = 1.5f;
  EXPECT_FALSE(o.validate().ok());
}

TEST(SpecGuardTest, PausesWhenCyclesCostMoreThanPlainStepsAndProbesAgain) {
  SpecGuard g(true);
  EXPECT_FALSE(g.want_draft());  // warm-up: plain steps first
  for (int i = 0; i < SpecGuard::kWarmupSteps; ++i) g.plain_step(1.0);
  EXPECT_TRUE(g.want_draft());
  // A cycle that handed out one token for 1.5 plain steps' time: pause.
  EXPECT_TRUE(g.cycle(1.5, 1));
  EXPECT_EQ(g.pauses(), 1);
  EXPECT_FALSE(g.want_draft());
  for (int64_t i = 0; i < SpecGuard::kMinBackoff - 1; ++i) g.plain_step(1.0);
  EXPECT_FALSE(g.want_draft());
  g.plain_step(1.0);
  EXPECT_TRUE(g.want_draft());
  EXPECT_EQ(g.probes(), 1);
  // The second failed probe waits twice as long.
  EXPECT_TRUE(g.cycle(3.0, 2));
  for (int64_t i = 0; i < 2 * SpecGuard::kMinBackoff - 1; ++i) g.plain_step(1.0);
  EXPECT_FALSE(g.want_draft());
  g.plain_step(1.0);
  EXPECT_TRUE(g.want_draft());
  // Cycles that pay (3 tokens for 1.2 steps' time) keep it on.
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(g.cycle(1.2, 3));
  EXPECT_TRUE(g.want_draft());
  EXPECT_EQ(g.pauses(), 2);
  // Disabled: always on.
  SpecGuard off(false);
  EXPECT_TRUE(off.want_draft());
  EXPECT_FALSE(off.cycle(100.0, 1));
  EXPECT_TRUE(off.want_draft());
}

}  // namespace
}  // namespace strata::runtime
