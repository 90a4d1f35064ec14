// The batched forward (model/forward_request.h) on the v41-tiny fixture model: an entry's logits and
// cache are bit-identical whether it runs alone or batched with 1..7 other sequences of other
// lengths (prefill chunks and decode tokens mixed), in any position of the batch; and the errors
// of a request are reported before any cache changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "tests/support/tiny_suite.h"

namespace strata::model {
namespace {

// One step of a sequence: a prompt chunk (kPrompt) or one decode token (kDecode, the greedy token
// of the previous step's logits).
struct Step {
  RowKind kind;
  int64_t len;  // prompt tokens (kPrompt); 1 for kDecode
};

// A sequence and its schedule of steps.
struct Seq {
  std::vector<int32_t> prompt;
  std::vector<Step> steps;
  KvCache cache;
  size_t next = 0, fed = 0;             // next step; prompt tokens fed so far
  std::vector<int32_t> tok;             // this step's tokens
  std::vector<float> logits;            // last step's logits (the last row's)
  bool all_rows = false;                // ask for every row's logits (the head then runs more rows)
  std::vector<float> all_logits;
  std::vector<std::vector<float>> log;  // logits after every step

  bool done() const { return next == steps.size(); }
  // The tokens of the next step.
  void prepare() {
    const Step& s = steps[next];
    if (s.kind == RowKind::kPrompt) {
      tok.assign(prompt.begin() + static_cast<std::ptrdiff_t>(fed), prompt.begin() + static_cast<std::ptrdiff_t>(fed + s.len));
    } else {
      tok.assign(1, runtime::argmax(logits));
    }
  }
  ForwardEntry entry() {
    ForwardEntry e;
    e.cache = &cache;
    e.tokens = tok;
    e.kind = steps[next].kind;
    e.logits_out = logits.data();
    if (all_rows) {
      const size_t V = logits.size();
      all_logits.resize(tok.size() * V);
      e.logits.kind = LogitsRequest::Kind::kAll;
      e.logits_out = all_logits.data();
    }
    return e;
  }
  void finish() {
    if (all_rows) std::copy(all_logits.end() - static_cast<std::ptrdiff_t>(logits.size()), all_logits.end(), logits.begin());
    if (steps[next].kind == RowKind::kPrompt) fed += static_cast<size_t>(steps[next].len);
    log.push_back(logits);
    ++next;
  }
};

class BatchTiny : public testing::TinyModelSuite<BatchTiny> {
 protected:
  Seq make_seq(std::vector<int32_t> prompt, std::vector<int64_t> chunks, int decode_steps) {
    Seq s;
    s.prompt = std::move(prompt);
    for (int64_t c : chunks) s.steps.push_back({RowKind::kPrompt, c});
    for (int i = 0; i < decode_steps; ++i) s.steps.push_back({RowKind::kDecode, 1});
    s.cache = model_->new_cache();
    s.logits.assign(static_cast<size_t>(model_->config().vocab_size), 0.0f);
    return s;
  }
  // Runs every step of `s` alone.
  void run_alone(Seq& s) {
    Activations act = model_->new_activations();
    while (!s.done()) {
      s.prepare();
      ForwardEntry e = s.entry();
      Status st = model_->forward(ForwardRequest{std::span<ForwardEntry>(&e, 1)}, act);
      ASSERT_TRUE(st.ok()) << st.to_string();
      s.finish();
    }
  }
  std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n) {
    std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(model_->config().vocab_size) - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = d(rng);
    return t;
  }
};

// The target: the fixture prompt in two chunks, then 6 decode steps.
TEST_F(BatchTiny, EntryLogitsAreBitIdenticalAloneAndBatched) {
  const int64_t n = static_cast<int64_t>(ids_.size());
  ASSERT_GE(n, 4);
  auto target_schedule = [&] { return make_seq(ids_, {n / 2, n - n / 2}, 6); };
  Seq alone = target_schedule();
  run_alone(alone);
  const size_t steps = alone.log.size();

  for (int others = 1; others <= 7; ++others) {
    std::mt19937 rng(static_cast<uint32_t>(100 + others));
    Seq target = target_schedule();
    std::vector<Seq> rest;
    for (int j = 0; j < others; ++j) {
      const int64_t len = 3 + static_cast<int64_t>(rng() % 40);
      std::vector<int64_t> chunks;
      for (int64_t done = 0; done < len;) {
        const int64_t c = std::min<int64_t>(len - done, 1 + static_cast<int64_t>(rng() % 17));
        chunks.push_back(c);
        done += c;
      }
      rest.push_back(make_seq(random_tokens(rng, len), chunks, 4 + static_cast<int>(rng() % 8)));
      rest.back().all_rows = rng() % 2 == 0;  // more head rows: the head's regime must not follow the batch
    }
    Activations act = model_->new_activations();
    while (!target.done()) {
      // The target plus the others' next steps (some sit this step out), in a shuffled order.
      std::vector<Seq*> batch = {&target};
      for (Seq& s : rest)
        if (!s.done() && rng() % 4 != 0) batch.push_back(&s);
      std::shuffle(batch.begin(), batch.end(), rng);
      std::vector<ForwardEntry> entries;
      for (Seq* s : batch) {
        s->prepare();
        entries.push_back(s->entry());
      }
      Status st = model_->forward(ForwardRequest{entries}, act);
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (Seq* s : batch) s->finish();
    }
    ASSERT_EQ(target.log.size(), steps);
    for (size_t i = 0; i < steps; ++i)
      EXPECT_EQ(0, std::memcmp(target.log[i].data(), alone.log[i].data(), alone.log[i].size() * sizeof(float)))
          << "step " << i << " with " << others << " other sequences";
    EXPECT_EQ(target.cache.n_past, alone.cache.n_past);
    EXPECT_EQ(target.cache.global_bytes(), alone.cache.global_bytes());
    for (size_t l = 0; l < alone.cache.layers.size(); ++l)
      EXPECT_EQ(target.cache.layers[l].window, alone.cache.layers[l].window) << "window ring of layer " << l;
  }
}

// The others' results do not depend on the target either: every sequence of a batched run equals
// its own run alone.
TEST_F(BatchTiny, EverySequenceOfABatchEqualsItsRunAlone) {
  std::mt19937 rng(7);
  std::vector<Seq> seqs, solo;
  for (int j = 0; j < 5; ++j) {
    const int64_t len = 5 + 7 * j;
    auto prompt = random_tokens(rng, len);
    seqs.push_back(make_seq(prompt, {len}, 3 + j));
    solo.push_back(make_seq(prompt, {len}, 3 + j));
  }
  for (Seq& s : solo) run_alone(s);
  Activations act = model_->new_activations();
  for (;;) {
    std::vector<ForwardEntry> entries;
    std::vector<Seq*> batch;
    for (Seq& s : seqs)
      if (!s.done()) {
        s.prepare();
        entries.push_back(s.entry());
        batch.push_back(&s);
      }
    if (entries.empty()) break;
    ASSERT_TRUE(model_->forward(ForwardRequest{entries}, act).ok());
    for (Seq* s : batch) s->finish();
  }
  for (size_t j = 0; j < seqs.size(); ++j)
    for (size_t i = 0; i < solo[j].log.size(); ++i)
      EXPECT_EQ(0, std::memcmp(seqs[j].log[i].data(), solo[j].log[i].data(), solo[j].log[i].size() * sizeof(float)))
          << "sequence " << j << " step " << i;
}

TEST_F(BatchTiny, BadRequestsChangeNoCache) {
  Activations act = model_->new_activations();
  KvCache a = model_->new_cache(), b = model_->new_cache();
  std::vector<float> la(static_cast<size_t>(model_->config().vocab_size)), lb(la.size());
  const std::vector<int32_t> good = {5, 6, 7};
  const std::vector<int32_t> bad = {5, static_cast<int32_t>(model_->config().vocab_size)};
  auto try_pair = [&](std::span<const int32_t> ta, std::span<const int32_t> tb, KvCache* cb) {
    ForwardEntry e[2];
    e[0].cache = &a;
    e[0].tokens = ta;
    e[0].logits_out = la.data();
    e[1].cache = cb;
    e[1].tokens = tb;
    e[1].logits_out = lb.data();
    return model_->forward(ForwardRequest{e}, act);
  };
  EXPECT_EQ(try_pair(good, bad, &b).code(), StatusCode::kInvalidArgument);  // token out of range in entry 1
  EXPECT_EQ(try_pair(good, good, &a).code(), StatusCode::kInvalidArgument);  // one cache twice
  EXPECT_EQ(try_pair(good, {}, &b).code(), StatusCode::kInvalidArgument);    // an entry without tokens
  {  // two entries, one logits buffer
    ForwardEntry e[2];
    e[0].cache = &a;
    e[0].tokens = good;
    e[0].logits_out = la.data();
    e[1].cache = &b;
    e[1].tokens = good;
    e[1].logits_out = la.data();
    EXPECT_EQ(model_->forward(ForwardRequest{e}, act).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(a.n_past, 0);
  EXPECT_EQ(b.n_past, 0);
  EXPECT_EQ(model_->forward(ForwardRequest{}, act).code(), StatusCode::kInvalidArgument);
  // A replay tail is only for a request of one entry.
  ForwardEntry e[2];
  e[0].cache = &a;
  e[0].tokens = good;
  e[0].decoder_tail = 1;
  e[0].logits_out = la.data();
  e[1].cache = &b;
  e[1].tokens = good;
  e[1].logits_out = lb.data();
  EXPECT_EQ(model_->forward(ForwardRequest{e}, act).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.n_past, 0);
  EXPECT_TRUE(try_pair(good, good, &b).ok());
  EXPECT_EQ(a.n_past, 3);
  EXPECT_EQ(b.n_past, 3);
}

}  // namespace
}  // namespace strata::model
