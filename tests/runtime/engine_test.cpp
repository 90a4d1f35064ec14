// The generation loop (runtime/engine.h, issue 14 items 1 and 5) over the v41-tiny checkpoint:
// greedy answers of concurrent sequences (different prompt lengths, prompt chunks mixed with decode
// tokens, joins and leaves mid-way) equal each one alone, token for token; the per-step token
// budget and the absolute chunk cuts; the gone probe; stop strings; input checks in one place; and
// a failed batch settling every member's session.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/tiny_suite.h"

namespace strata::runtime {
namespace {

class EngineTiny : public testing::TinyModelSuite<EngineTiny> {
 protected:
  // Prompt `k`: the fixture prompt cut to `len` tokens with its last tokens rotated by k, so the
  // sequences differ in length and content.
  static std::vector<int32_t> prompt(size_t len, int k) {
    std::vector<int32_t> p(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(len));
    for (int i = 0; i < k && p.size() > 2; ++i)
      std::swap(p[p.size() - 1 - static_cast<size_t>(i)], p[1 + static_cast<size_t>(i)]);
    return p;
  }
  static EngineOptions options() {
    EngineOptions o;
    o.prefill_chunk = 32;
    o.batch_tokens = 48;
    return o;
  }
  static SequenceOptions greedy(int64_t n) {
    SequenceOptions o;
    o.max_new_tokens = n;
    o.sampler.temperature = 0;
    return o;
  }
  // One sequence alone through its own engine: its greedy tokens.
  static std::vector<int32_t> alone(const std::vector<int32_t>& p, int64_t n) {
    Engine e(*model_, options());
    Session s(*model_);
    std::vector<int32_t> got;
    bool done = false;
    SequenceCallbacks cb;
    cb.on_token = [&](int32_t t) {
      got.push_back(t);
      return true;
    };
    cb.on_finish = [&](FinishReason, const Status& st, const SequenceStats&) {
      EXPECT_TRUE(st.ok()) << st.to_string();
      done = true;
    };
    EXPECT_TRUE(e.add(&s, p, greedy(n), std::move(cb)).ok());
    while (!done) e.step();
    return got;
  }
};

struct Job {
  std::vector<int32_t> prompt;
  int64_t n = 0;
  int join_at_step = 0;  // the engine step before which it is added
  std::vector<int32_t> got;
  bool done = false;
  std::unique_ptr<Session> session;
};

// Issue 14 acceptance: "greedy answers of concurrent requests equal their answers alone".
TEST_F(EngineTiny, ConcurrentGreedySequencesEqualEachAlone) {
  std::vector<Job> jobs(5);
  jobs[0] = Job{prompt(197, 0), 12, 0};
  jobs[1] = Job{prompt(70, 1), 20, 0};   // leaves early (fewer tokens), others keep going
  jobs[2] = Job{prompt(33, 2), 6, 3};    // joins while the others prefill / decode
  jobs[3] = Job{prompt(120, 3), 10, 8};  // joins mid-way through the others' decoding
  jobs[4] = Job{prompt(5, 4), 15, 9};    // a prompt shorter than one chunk
  Engine e(*model_, options());
  std::vector<StepStats> steps;
  size_t next = 0;
  auto all_done = [&] {
    for (const Job& j : jobs)
      if (!j.done) return false;
    return true;
  };
  for (int step = 0; !all_done(); ++step) {
    for (; next < jobs.size() && jobs[next].join_at_step <= step; ++next) {
      Job& j = jobs[next];
      j.session = std::make_unique<Session>(*model_);
      SequenceCallbacks cb;
      cb.on_token = [&j](int32_t t) {
        j.got.push_back(t);
        return true;
      };
      cb.on_finish = [&j](FinishReason r, const Status& st, const SequenceStats& ss) {
        EXPECT_TRUE(st.ok()) << st.to_string();
        EXPECT_EQ(r, FinishReason::kLength);
        EXPECT_EQ(ss.generated_tokens, j.n);
        j.done = true;
      };
      ASSERT_TRUE(e.add(j.session.get(), j.prompt, greedy(j.n), std::move(cb)).ok());
    }
    steps.push_back(e.step());
    ASSERT_TRUE(steps.back().status.ok()) << steps.back().status.to_string();
    ASSERT_LT(step, 1000);
  }
  // The batches really mixed: some step ran prompt chunks beside decode tokens of others, and some
  // ran several decode tokens together.
  bool mixed = false, multi_decode = false;
  for (const StepStats& s : steps) {
    mixed = mixed || (s.decode_entries > 0 && s.prompt_tokens > 0);
    multi_decode = multi_decode || s.decode_entries >= 3;
    // The budget: at most max(batch_tokens, decode tokens + one chunk).
    EXPECT_LE(s.tokens, std::max<int64_t>(48, s.decode_entries + 32));
  }
  EXPECT_TRUE(mixed);
  EXPECT_TRUE(multi_decode);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(jobs[i].got.size(), static_cast<size_t>(jobs[i].n)) << "sequence " << i;
    EXPECT_EQ(jobs[i].got, alone(jobs[i].prompt, jobs[i].n)) << "sequence " << i;
    EXPECT_EQ(jobs[i].session->n_past(), static_cast<int64_t>(jobs[i].prompt.size()) + jobs[i].n - 1);
  }
}

// Prompt chunks end at absolute multiples of the chunk (where the prefix cache resumes), at the
// requested snapshot positions, and at the prompt's end; on_snapshot sees each of them.
TEST_F(EngineTiny, ChunksEndAtAbsoluteMultiplesAndSnapshotPositions) {
  Engine e(*model_, options());
  Session s(*model_);
  ASSERT_TRUE(s.append(std::span<const int32_t>(ids_).subspan(0, 10), nullptr).ok());
  SequenceOptions o = greedy(1);
  o.snapshot_at = {50, 90};
  std::vector<int64_t> seen;
  bool done = false;
  SequenceCallbacks cb;
  cb.on_snapshot = [&](const Session& x) { seen.push_back(x.n_past()); };
  cb.on_finish = [&](FinishReason, const Status&, const SequenceStats&) { done = true; };
  ASSERT_TRUE(e.add(&s, std::vector<int32_t>(ids_.begin() + 10, ids_.begin() + 100), o, std::move(cb)).ok());
  while (!done) e.step();
  EXPECT_EQ(seen, (std::vector<int64_t>{32, 50, 64, 90, 96, 100}));
}

// A slot session that keeps undo records (server --slot-undo, default the window) can rewind into
// the last `depth` positions of a prompt whose chunks are longer than the window (issue 17: the
// next turn of an edited conversation reuses the slot by rewind); the cut changes no logits.
TEST_F(EngineTiny, UndoLoggingSessionCanRewindIntoItsPromptTail) {
  const int64_t win = model_->config().window_size, n = 100;
  ASSERT_LT(win, 36) << "the test needs a last chunk (36 tokens) longer than the window";
  EngineOptions eo = options();
  eo.prefill_chunk = 64;
  eo.batch_tokens = 256;
  Engine e(*model_, eo);
  Session s(*model_);
  s.set_undo_depth(win);
  std::vector<float> last;
  bool done = false;
  SequenceCallbacks cb;
  cb.on_finish = [&](FinishReason, const Status& st, const SequenceStats&) {
    EXPECT_TRUE(st.ok()) << st.to_string();
    done = true;
  };
  ASSERT_TRUE(e.add(&s, std::vector<int32_t>(ids_.begin(), ids_.begin() + n), greedy(1), std::move(cb)).ok());
  while (!done) e.step();
  ASSERT_EQ(s.n_past(), n);
  EXPECT_LE(s.rewind_floor(), n - win);
  ASSERT_TRUE(s.rewind(n - win).ok());
  // The rewound session continues exactly as one that only ever saw the shorter prompt.
  Session fresh(*model_);
  std::vector<float> want(static_cast<size_t>(model_->config().vocab_size)), got(want.size());
  ASSERT_TRUE(fresh.append(std::span<const int32_t>(ids_).subspan(0, static_cast<size_t>(n - win + 1)), want.data()).ok());
  ASSERT_TRUE(s.append(std::span<const int32_t>(ids_).subspan(static_cast<size_t>(n - win), 1), got.data()).ok());
  EXPECT_EQ(want, got);
}

// A sequence whose gone probe fires ends before the next step without another token; the others
// go on unchanged.
// A short prompt that arrives while a long one is being prefilled runs in the next step (the fewest
// tokens left go first, the long prompt's chunk is cut to the rest of the budget), and both still
// give their answers alone.
TEST_F(EngineTiny, ShortPromptDoesNotWaitForALongPrefill) {
  EngineOptions o;
  o.prefill_chunk = 32;
  o.batch_tokens = 32;  // one chunk: without the ordering the short prompt waits for all of them
  Engine e(*model_, o);
  Session a(*model_), b(*model_);
  std::vector<int32_t> got_a, got_b;
  bool done_a = false, done_b = false;
  SequenceCallbacks ca, cb;
  ca.on_token = [&](int32_t t) { got_a.push_back(t); return true; };
  ca.on_finish = [&](FinishReason, const Status&, const SequenceStats&) { done_a = true; };
  cb.on_token = [&](int32_t t) { got_b.push_back(t); return true; };
  cb.on_finish = [&](FinishReason, const Status&, const SequenceStats&) { done_b = true; };
  const std::vector<int32_t> pa = prompt(190, 3), pb = prompt(6, 4);
  ASSERT_TRUE(e.add(&a, pa, greedy(4), std::move(ca)).ok());
  e.step();  // the long prompt's first chunk
  ASSERT_TRUE(e.add(&b, pb, greedy(4), std::move(cb)).ok());
  e.step();
  EXPECT_EQ(got_b.size(), 1u) << "the short prompt ran in the step after it arrived";
  EXPECT_TRUE(got_a.empty()) << "the long prompt is still being prefilled";
  while (!done_a || !done_b) e.step();
  EXPECT_EQ(got_a, alone(pa, 4));
  EXPECT_EQ(got_b, alone(pb, 4));
}

TEST_F(EngineTiny, GoneSequenceLeavesWithinOneStep) {
  Engine e(*model_, options());
  Session a(*model_), b(*model_);
  bool gone = false;
  std::vector<int32_t> got_a, got_b;
  FinishReason end_a = FinishReason::kLength;
  Status st_a;
  bool done_a = false, done_b = false;
  SequenceCallbacks ca;
  ca.on_token = [&](int32_t t) {
    got_a.push_back(t);
    if (got_a.size() == 2) gone = true;
    return true;
  };
  ca.gone = [&] { return gone; };
  ca.on_finish = [&](FinishReason r, const Status& st, const SequenceStats&) {
    end_a = r;
    st_a = st;
    done_a = true;
  };
  SequenceCallbacks cb;
  cb.on_token = [&](int32_t t) {
    got_b.push_back(t);
    return true;
  };
  cb.on_finish = [&](FinishReason, const Status&, const SequenceStats&) { done_b = true; };
  const std::vector<int32_t> pa = prompt(40, 1), pb = prompt(60, 2);
  ASSERT_TRUE(e.add(&a, pa, greedy(10), std::move(ca)).ok());
  ASSERT_TRUE(e.add(&b, pb, greedy(8), std::move(cb)).ok());
  while (!done_a || !done_b) e.step();
  EXPECT_EQ(end_a, FinishReason::kCancelled);
  EXPECT_EQ(st_a.code(), StatusCode::kCancelled);
  EXPECT_EQ(got_a.size(), 2u);
  EXPECT_EQ(got_b, alone(pb, 8));
}

// Stop ids end with kStopId; a stop string split across tokens ends with kStopped after the token
// that completes it; the callback returning false ends with kStopped.
TEST_F(EngineTiny, StopIdsAndStopStrings) {
  const std::map<int32_t, std::string> text = {{10, "ab"}, {11, "c"}, {12, "d!"}, {13, "e"}};
  auto run = [&](SequenceOptions o, std::vector<int32_t>* got) {
    Engine e(*model_, options());
    Session s(*model_);
    FinishReason end = FinishReason::kError;
    bool done = false;
    SequenceCallbacks cb;
    cb.on_token = [&](int32_t t) {
      got->push_back(t);
      return true;
    };
    cb.on_finish = [&](FinishReason r, const Status&, const SequenceStats&) {
      end = r;
      done = true;
    };
    o.use_script = true;
    o.scripted = {10, 11, 12, 13, 13, 13};
    o.script_end_id = 13;
    o.token_text = [&](int32_t id) { return text.count(id) ? text.at(id) : std::string(); };
    EXPECT_TRUE(e.add(&s, prompt(8, 0), std::move(o), std::move(cb)).ok());
    while (!done) e.step();
    return end;
  };
  std::vector<int32_t> got;
  SequenceOptions o = greedy(20);
  o.stop_strings = {"cd"};
  EXPECT_EQ(run(o, &got), FinishReason::kStopped);
  EXPECT_EQ(got, (std::vector<int32_t>{10, 11, 12}));
  got.clear();
  o = greedy(20);
  o.stop_ids = {12};
  EXPECT_EQ(run(o, &got), FinishReason::kStopId);
  EXPECT_EQ(got, (std::vector<int32_t>{10, 11, 12}));
  got.clear();
  o = greedy(4);
  EXPECT_EQ(run(o, &got), FinishReason::kLength);
  EXPECT_EQ(got.size(), 4u);
}

// OpenAI penalties: each token is the argmax of the logits less frequency x count + presence over
// the sequence's earlier tokens (runtime::apply_penalties), and they change the greedy answer.
// Negative values (the API allows -2..2) favour repeats: on the tiny model's wide logit gaps only
// those change picks within 24 tokens.
TEST_F(EngineTiny, PenaltiesApplyToEveryPick) {
  Engine e(*model_, options());
  Session s(*model_);
  SequenceOptions o = greedy(24);
  o.presence_penalty = -2.0f;
  o.frequency_penalty = -2.0f;
  std::vector<int32_t> got;
  int changed = 0;
  bool done = false;
  SequenceCallbacks cb;
  cb.on_token = [&](int32_t t) {
    std::vector<float> adjusted;
    apply_penalties(s.last_logits(), got, -2.0f, -2.0f, &adjusted);  // the logits this pick used
    EXPECT_EQ(t, argmax(adjusted)) << "token " << got.size();
    changed += t != argmax(s.last_logits());
    got.push_back(t);
    return true;
  };
  cb.on_finish = [&](FinishReason, const Status&, const SequenceStats&) { done = true; };
  ASSERT_TRUE(e.add(&s, prompt(40, 0), o, std::move(cb)).ok());
  while (!done) e.step();
  EXPECT_EQ(got.size(), 24u);
  EXPECT_GT(changed, 0) << "the penalties never changed a pick: the test shows nothing";
}

// A constraint allowing only odd ids below 200; records the ids it is shown.
class OddIds : public TokenConstraint {
 public:
  size_t apply(std::span<float> logits) override {
    for (size_t i = 0; i < logits.size(); ++i)
      if (i >= 200 || i % 2 == 0) logits[i] = -INFINITY;
    return 100;
  }
  void accept(int32_t id) override { seen.push_back(id); }
  std::vector<int32_t> seen;
};

// Constrained decoding (SequenceOptions::constraint): every pick is the argmax over the allowed ids,
// every emitted id reaches accept(), and the logprob reports are of the constrained distribution.
TEST_F(EngineTiny, ConstraintMasksEveryPickAndSeesEveryToken) {
  Engine e(*model_, options());
  Session s(*model_);
  SequenceOptions o = greedy(12);
  o.logprobs = 0;
  auto c = std::make_shared<OddIds>();
  o.constraint = c;
  std::vector<int32_t> got;
  int constrained = 0;
  bool done = false;
  SequenceCallbacks cb;
  cb.on_logprob = [&](const TokenLogprob& r) {
    std::vector<float> masked(s.last_logits().begin(), s.last_logits().end());
    OddIds().apply(masked);
    TokenLogprob want;
    token_logprob(masked, 0.0f, r.id, 0, &want);
    EXPECT_NEAR(r.logprob, want.logprob, 1e-5);
    TokenLogprob free;
    token_logprob(s.last_logits(), 0.0f, r.id, 0, &free);
    EXPECT_GT(r.logprob, free.logprob);  // the masked ids' mass went to the allowed ones
  };
  cb.on_token = [&](int32_t t) {
    std::vector<float> masked(s.last_logits().begin(), s.last_logits().end());
    OddIds().apply(masked);
    EXPECT_EQ(t, argmax(masked)) << "token " << got.size();
    constrained += t != argmax(s.last_logits());
    got.push_back(t);
    return true;
  };
  cb.on_finish = [&](FinishReason, const Status&, const SequenceStats&) { done = true; };
  ASSERT_TRUE(e.add(&s, prompt(40, 0), o, std::move(cb)).ok());
  while (!done) e.step();
  EXPECT_EQ(got.size(), 12u);
  EXPECT_EQ(c->seen, got);
  EXPECT_GT(constrained, 0) << "the mask never changed a pick: the test shows nothing";
}

// A bounded-replay prompt (a forward entry with decoder_tail needs a request of its own) runs its
// steps alone while another sequence decodes around it: its session equals Session::append in
// replay mode (same chunk cuts) and the other sequence's tokens equal its tokens alone.
TEST_F(EngineTiny, ReplayPromptRunsAloneBesideOthers) {
  Engine e(*model_, options());
  Session a(*model_), r(*model_);
  std::vector<int32_t> got_a;
  int done = 0;
  SequenceCallbacks ca;
  ca.on_token = [&](int32_t t) {
    got_a.push_back(t);
    return true;
  };
  ca.on_finish = [&](FinishReason, const Status& st, const SequenceStats&) {
    EXPECT_TRUE(st.ok()) << st.to_string();
    ++done;
  };
  SequenceCallbacks cr;
  cr.on_finish = ca.on_finish;
  const std::vector<int32_t> pa = prompt(20, 1);
  ASSERT_TRUE(e.add(&a, pa, greedy(12), std::move(ca)).ok());
  e.step();                        // a has its first token and decodes from now on
  SequenceOptions ro = greedy(0);  // prefill only: the session ends with the prompt's logits
  ro.prefill_mode = PrefillMode::kReplay;
  ASSERT_TRUE(e.add(&r, ids_, ro, std::move(cr)).ok());
  int alone_steps = 0;
  while (done < 2) {
    const StepStats st = e.step();
    ASSERT_TRUE(st.status.ok()) << st.status.to_string();
    if (st.prompt_tokens > 0) {
      EXPECT_EQ(st.entries, 1);  // the replay chunk alone
      ++alone_steps;
    }
  }
  EXPECT_EQ(alone_steps, 6);  // 197 tokens at chunk 32: ends 32..160, then [160, 197) (tail of 37 >= window)
  EXPECT_EQ(got_a, alone(pa, 12));
  AppendOptions o;
  o.chunk = 32;
  o.mode = PrefillMode::kReplay;
  Session want(*model_);
  ASSERT_TRUE(want.append(ids_, o).ok());
  EXPECT_TRUE(r.replayed());
  EXPECT_EQ(r.tokens(), want.tokens());
  ASSERT_EQ(r.last_logits().size(), want.last_logits().size());
  EXPECT_TRUE(std::equal(r.last_logits().begin(), r.last_logits().end(), want.last_logits().begin()));
}

// Input checks live in add(), before anything runs.
TEST_F(EngineTiny, AddChecksInputsOnce) {
  Engine e(*model_, options());
  Session s(*model_);
  SequenceCallbacks cb;
  auto bad = e.add(&s, {1, static_cast<int>(model_->config().vocab_size + 3)}, greedy(1), cb);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.error().message().find("at position 1"), std::string::npos) << bad.error().to_string();
  auto empty = e.add(&s, {}, greedy(1), cb);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message().find("empty prompt"), std::string::npos);
  SequenceOptions o = greedy(1);
  o.max_context = 20;
  auto longp = e.add(&s, prompt(30, 0), o, cb);
  ASSERT_FALSE(longp.ok());
  EXPECT_EQ(longp.error().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(e.idle());
  EXPECT_EQ(s.n_past(), 0);
  ASSERT_TRUE(e.add(&s, prompt(5, 0), greedy(1), cb).ok());
  auto twice = e.add(&s, prompt(5, 0), greedy(1), cb);
  EXPECT_FALSE(twice.ok());  // one sequence per session
}

// A forward that fails ends every sequence of its batch with kError, and each session turns
// invalid exactly when its cache moved (Session::end_forward): the caller discards those.
TEST_F(EngineTiny, FailedBatchSettlesEverySession) {
  Engine e(*model_, options());
  Session a(*model_), b(*model_);
  std::vector<FinishReason> ends;
  SequenceCallbacks cb;
  cb.on_finish = [&](FinishReason r, const Status& st, const SequenceStats&) {
    ends.push_back(r);
    EXPECT_FALSE(st.ok());
  };
  ASSERT_TRUE(e.add(&a, prompt(10, 0), greedy(3), cb).ok());
  ASSERT_TRUE(e.add(&b, prompt(12, 1), greedy(3), cb).ok());
  b.cache().layers.pop_back();  // the model refuses this cache ("not made by this model")
  const StepStats st = e.step();
  EXPECT_FALSE(st.status.ok());
  EXPECT_EQ(st.entries, 2);
  EXPECT_EQ(ends, (std::vector<FinishReason>{FinishReason::kError, FinishReason::kError}));
  EXPECT_TRUE(e.idle());
  EXPECT_EQ(a.valid(), a.cache().n_past == 0);
  EXPECT_EQ(b.valid(), b.cache().n_past == 0);
  EXPECT_TRUE(a.tokens().empty());
  EXPECT_TRUE(b.tokens().empty());
}

}  // namespace
}  // namespace strata::runtime
