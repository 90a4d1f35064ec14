// Session::rewind over the v41-tiny checkpoint (issue 17 item 4): a session grown to L + k and cut
// back to any m in [L, L + k] holds byte for byte the caches of one grown to m the same way
// (decode steps, or a prompt chunk), and the next token's logits are bit-identical. Also: a
// verification entry (k decode rows in one forward) equals k decode steps, copies sharing pages are
// not disturbed by a rewind and what follows it, and rewinds past the undo log are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "runtime/session.h"
#include "tests/support/forward_one.h"
#include "tests/support/tiny_suite.h"

namespace strata::runtime {
namespace {

// Every byte a cache's state consists of (stored rows only, not page slack), for exact comparison.
std::vector<uint8_t> dump(const model::KvCache& k) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  put(&k.n_past, sizeof k.n_past);
  for (uint32_t id : k.engram_history.ids()) put(&id, sizeof id);
  for (const model::LayerKvCache& lc : k.layers) {
    put(lc.window.data(), lc.window.size());
    put(lc.window_pos.data(), lc.window_pos.size() * sizeof(int64_t));
    put(lc.kv_state.data(), lc.kv_state.size() * sizeof(float));
    put(lc.score_state.data(), lc.score_state.size() * sizeof(float));
    put(&lc.comp_pos, sizeof lc.comp_pos);
    const int64_t nc = lc.compressed.size(), ni = lc.index_keys.size();
    put(&nc, sizeof nc);
    for (int64_t g = 0; g < nc; ++g) put(lc.compressed.row(g), static_cast<size_t>(lc.compressed.row_bytes()));
    put(&ni, sizeof ni);
    for (int64_t g = 0; g < ni; ++g) put(lc.index_keys.row(g), static_cast<size_t>(lc.index_keys.row_bytes()));
  }
  return out;
}

bool same_floats(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class RewindTiny : public testing::TinyModelSuite<RewindTiny> {
 protected:
  // Runs ids_[from, to) into `s`: one decode step per token (kDecode) or one prompt chunk (kPrompt).
  void grow(Session& s, int64_t from, int64_t to, model::RowKind kind, model::Activations& act) {
    AppendOptions o;
    o.chunk = 4096;
    o.kind = kind;
    o.activations = &act;
    std::span<const int32_t> all(ids_);
    if (kind == model::RowKind::kDecode) {
      for (int64_t p = from; p < to; ++p) ASSERT_TRUE(s.append(all.subspan(static_cast<size_t>(p), 1), o).ok());
    } else if (to > from) {
      ASSERT_TRUE(s.append(all.subspan(static_cast<size_t>(from), static_cast<size_t>(to - from)), o).ok());
    }
  }
  // The next token after `s` (ids_[n_past]) as one decode step; returns its logits.
  std::vector<float> next_logits(Session& s, model::Activations& act) {
    AppendOptions o;
    o.kind = model::RowKind::kDecode;
    o.activations = &act;
    std::span<const int32_t> all(ids_);
    EXPECT_TRUE(s.append(all.subspan(static_cast<size_t>(s.n_past()), 1), o).ok());
    return std::vector<float>(s.last_logits().begin(), s.last_logits().end());
  }

  // Prefill L, grow to L + k with `kind`, then for every m: a copy rewound to m equals a session
  // prefilled to L and grown to m the same way (bytes, tokens), and so does the token after it.
  void check_every_m(int64_t L, int64_t k, model::RowKind kind) {
    model::Activations act = model_->new_activations();
    std::span<const int32_t> all(ids_);
    Session s(*model_);
    ASSERT_TRUE(s.append(all.subspan(0, static_cast<size_t>(L)), nullptr).ok());
    s.set_undo_depth(k);
    grow(s, L, L + k, kind, act);
    ASSERT_EQ(s.n_past(), L + k);
    EXPECT_LE(s.rewind_floor(), L);
    const std::vector<uint8_t> before = dump(s.cache());
    for (int64_t m = L; m <= L + k; ++m) {
      SCOPED_TRACE("L " + std::to_string(L) + " k " + std::to_string(k) + " m " + std::to_string(m));
      Session r = s;  // shares compressed pages with s
      ASSERT_TRUE(r.rewind(m).ok());
      EXPECT_EQ(r.n_past(), m);
      EXPECT_TRUE(m == L + k ? !r.last_logits().empty() : r.last_logits().empty());
      Session ref(*model_);
      ASSERT_TRUE(ref.append(all.subspan(0, static_cast<size_t>(L)), nullptr).ok());
      grow(ref, L, m, kind, act);
      EXPECT_EQ(r.tokens(), ref.tokens());
      EXPECT_TRUE(dump(r.cache()) == dump(ref.cache()));
      const std::vector<float> a = next_logits(r, act), b = next_logits(ref, act);
      EXPECT_TRUE(same_floats(a, b));
      EXPECT_TRUE(dump(r.cache()) == dump(ref.cache()));
    }
    // The rewound copies wrote after their cut into pages they shared with s: s is untouched.
    EXPECT_TRUE(dump(s.cache()) == before);
  }
};

TEST_F(RewindTiny, DecodedTokensRewindToEveryLength) {
  // Window 16, compress ratios 2 and 1 on the fixture: the ring wraps, groups split at odd m.
  check_every_m(37, 6, model::RowKind::kDecode);
  check_every_m(16, 5, model::RowKind::kDecode);
}

TEST_F(RewindTiny, AppendedChunkRewindsToEveryLength) {
  // A prompt chunk of k <= window tokens; prompt rows' bits do not depend on the chunk, so the
  // reference is one prefill of m tokens.
  check_every_m(40, 7, model::RowKind::kPrompt);
  check_every_m(41, 16, model::RowKind::kPrompt);
}

TEST_F(RewindTiny, VerificationRowsEqualDecodeSteps) {
  // k tokens in one kDecode entry with logits for every row (Session::begin_verify) = k decode steps.
  model::Activations act = model_->new_activations();
  std::span<const int32_t> all(ids_);
  const int64_t L = 45, k = 5, V = model_->config().vocab_size;
  Session v(*model_), d(*model_);
  ASSERT_TRUE(v.append(all.subspan(0, L), nullptr).ok());
  ASSERT_TRUE(d.append(all.subspan(0, L), nullptr).ok());
  std::vector<float> rows(static_cast<size_t>(k * V)), feats;
  model::ForwardEntry e = v.begin_verify(all.subspan(L, k), rows.data(), &feats);
  const Status st = model_->forward(model::ForwardRequest{std::span<model::ForwardEntry>(&e, 1)}, act);
  v.end_forward(st);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(v.last_logits().empty());
  for (int64_t i = 0; i < k; ++i) {
    std::vector<float> one(static_cast<size_t>(V));
    ASSERT_TRUE(test::forward_one(*model_, d.cache(), all.subspan(static_cast<size_t>(L + i), 1), {}, one.data(),
                                  nullptr, -1, nullptr, &act)
                    .ok());
    EXPECT_TRUE(same_floats(one, std::span<const float>(rows).subspan(static_cast<size_t>(i * V), static_cast<size_t>(V))))
        << "row " << i;
  }
  EXPECT_TRUE(dump(v.cache()) == dump(d.cache()));
  EXPECT_EQ(feats.size(), static_cast<size_t>(k * model_->config().dim *
                                              static_cast<int64_t>(model_->config().dspark_target_layer_ids.size())));
  // A rewind that supplies a row's logits leaves the session as if it had stopped there.
  v.set_undo_depth(k);  // records start with the next forward: this one is not undoable
  EXPECT_EQ(v.rewind(L + 2).code(), StatusCode::kNotSupported);
}

TEST_F(RewindTiny, RewindAcrossSeveralForwardsAndWithLogits) {
  model::Activations act = model_->new_activations();
  std::span<const int32_t> all(ids_);
  const int64_t L = 30, V = model_->config().vocab_size;
  Session s(*model_);
  ASSERT_TRUE(s.append(all.subspan(0, L), nullptr).ok());
  const std::vector<float> at_l(s.last_logits().begin(), s.last_logits().end());
  s.set_undo_depth(4);
  grow(s, L, L + 3, model::RowKind::kDecode, act);  // three records
  EXPECT_EQ(s.rewind_floor(), L);
  grow(s, L + 3, L + 9, model::RowKind::kDecode, act);  // the log keeps >= 4 positions
  EXPECT_LE(s.rewind_floor(), L + 5);
  EXPECT_GT(s.rewind_floor(), L);
  // Past the log: refused, nothing changed.
  const std::vector<uint8_t> before = dump(s.cache());
  EXPECT_EQ(s.rewind(L).code(), StatusCode::kNotSupported);
  EXPECT_EQ(s.rewind(L + 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.rewind(L + 9, std::vector<float>(3)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(dump(s.cache()) == before);
  EXPECT_EQ(s.n_past(), L + 9);
  // Back to L + 5 with logits supplied: they become last_logits().
  ASSERT_TRUE(s.rewind(L + 5, std::span<const float>(at_l)).ok());
  EXPECT_TRUE(same_floats(s.last_logits(), at_l));
  EXPECT_EQ(static_cast<int64_t>(s.last_logits().size()), V);
  Session ref(*model_);
  ASSERT_TRUE(ref.append(all.subspan(0, L), nullptr).ok());
  grow(ref, L, L + 5, model::RowKind::kDecode, act);
  EXPECT_TRUE(dump(s.cache()) == dump(ref.cache()));
}

}  // namespace
}  // namespace strata::runtime
