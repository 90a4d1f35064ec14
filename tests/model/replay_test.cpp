// CED bounded replay (Model::forward with decoder_tail) on the v41-tiny fixture: what it computes
// exactly like an exact prefill (encoder caches, the first decoder layer's compressed KV and index
// keys and its window ring), what it leaves out (decoder rings hold only the tail), that a prompt
// no longer than the window is exact, and the errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/forward_one.h"
#include "tests/support/npy.h"
#include "tests/support/tiny_model.h"
#include "tests/support/tiny_suite.h"

namespace strata::model {
namespace {

class ReplayTiny : public testing::TinyModelSuite<ReplayTiny> {
 protected:
  static std::vector<float> last_logits(KvCache& cache, std::span<const int32_t> t, int64_t tail) {
    std::vector<float> l(static_cast<size_t>(model_->config().vocab_size));
    LogitsRequest req;  // kLast
    Status s = strata::test::forward_one(*model_, cache, t, req, l.data(), nullptr, tail);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return l;
  }
  static bool same_rows(const PagedRows& a, const PagedRows& b) {
    if (a.size() != b.size() || a.row_bytes() != b.row_bytes()) return false;
    for (int64_t i = 0; i < a.size(); ++i)
      if (std::memcmp(a.row(i), b.row(i), static_cast<size_t>(a.row_bytes())) != 0) return false;
    return true;
  }
};

TEST_F(ReplayTiny, BoundaryIsTheFirstRatioOneLayer) {
  auto b = model_->decoder_boundary();
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_EQ(*b, 5);  // compress_ratios [0,0,2,2,2,1,1,1]
}

TEST_F(ReplayTiny, GlobalCachesEqualExactPrefillAndDecoderRingsHoldOnlyTheTail) {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(ids_.size()), W = c.window_size;
  KvCache exact = model_->new_cache(), replay = model_->new_cache();
  last_logits(exact, ids_, -1);
  last_logits(replay, ids_, W);
  EXPECT_EQ(replay.n_past, n);
  EXPECT_EQ(replay.engram_history.ids().size(), exact.engram_history.ids().size());
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerKvCache& a = exact.layers[static_cast<size_t>(l)];
    const LayerKvCache& b = replay.layers[static_cast<size_t>(l)];
    // Every KV source (the encoder ones and the first decoder layer) holds the same bytes.
    EXPECT_TRUE(same_rows(a.compressed, b.compressed)) << "compressed KV, layer " << l;
    EXPECT_TRUE(same_rows(a.index_keys, b.index_keys)) << "index keys, layer " << l;
    EXPECT_EQ(a.comp_pos, b.comp_pos) << "layer " << l;
    EXPECT_EQ(a.kv_state, b.kv_state) << "layer " << l;
    // Rings hold the last W positions everywhere (what decode needs) ...
    EXPECT_EQ(a.window_pos, b.window_pos) << "layer " << l;
    // ... with the same bytes up to the first decoder layer, whose input is the encoder output.
    if (l <= 5) {
      EXPECT_EQ(a.window, b.window) << "window ring, layer " << l;
    }
  }
  // Later decoder layers saw tail tokens without their earlier window: their KV differs.
  EXPECT_NE(exact.layers[7].window, replay.layers[7].window);
}

TEST_F(ReplayTiny, PromptWithinTheWindowIsExact) {
  const int64_t W = model_->config().window_size;
  std::span<const int32_t> p(ids_.data(), static_cast<size_t>(W));
  KvCache a = model_->new_cache(), b = model_->new_cache();
  auto la = last_logits(a, p, -1);
  auto lb = last_logits(b, p, W);
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
}

TEST_F(ReplayTiny, ChunkedReplayEqualsOneReplayAndDecodeContinues) {
  // Encoder-only chunks (tail 0), then the last chunk replays its tail: the same as one forward.
  const int64_t W = model_->config().window_size, n = static_cast<int64_t>(ids_.size());
  KvCache one = model_->new_cache(), chunked = model_->new_cache();
  auto l1 = last_logits(one, ids_, W);
  std::span<const int32_t> all(ids_);
  ASSERT_TRUE(strata::test::forward_one(*model_, chunked, all.subspan(0, 64), LogitsRequest{LogitsRequest::Kind::kNone, {}}, nullptr, nullptr, 0).ok());
  ASSERT_TRUE(strata::test::forward_one(*model_, chunked, all.subspan(64, 64), LogitsRequest{LogitsRequest::Kind::kNone, {}}, nullptr, nullptr, 0).ok());
  auto l2 = last_logits(chunked, all.subspan(128, static_cast<size_t>(n - 128)), W);
  EXPECT_EQ(std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)), 0);
  // Decode after replay runs every layer normally (exact decode over the replayed state).
  const int32_t next[1] = {static_cast<int32_t>(std::max_element(l1.begin(), l1.end()) - l1.begin())};
  auto d1 = last_logits(one, next, -1);
  auto d2 = last_logits(chunked, next, -1);
  EXPECT_EQ(std::memcmp(d1.data(), d2.data(), d1.size() * sizeof(float)), 0);
}

TEST_F(ReplayTiny, LogitsOnlyForTheTail) {
  KvCache cache = model_->new_cache();
  LogitsRequest all;
  all.kind = LogitsRequest::Kind::kAll;
  std::vector<float> buf(static_cast<size_t>(ids_.size() * model_->config().vocab_size));
  Status s = strata::test::forward_one(*model_, cache, ids_, all, buf.data(), nullptr, 16);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  LogitsRequest rows;
  rows.kind = LogitsRequest::Kind::kRows;
  rows.rows = {10};
  s = strata::test::forward_one(*model_, cache, ids_, rows, buf.data(), nullptr, 16);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("before the replayed tail"), std::string::npos) << s.to_string();
  LogitsRequest last;  // a chunk with no decoder tail has no last logits
  s = strata::test::forward_one(*model_, cache, ids_, last, buf.data(), nullptr, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.n_past, 0);  // nothing ran
  rows.rows = {196};
  EXPECT_TRUE(strata::test::forward_one(*model_, cache, ids_, rows, buf.data(), nullptr, 16).ok());
}

TEST(ReplayConfig, BoundaryRules) {
  const std::string p = testing::fixtures_dir() + "/real-config/config.json";
  STRATA_REQUIRE_FIXTURE(p);
  auto c = ModelConfig::load(testing::fixtures_dir() + "/real-config");
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  auto b = ced_decoder_boundary(*c);
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_EQ(*b, 20);  // the release: layers 0-19 encoder, 20-39 decoder
  ModelConfig late = *c;
  late.kv_source_layers = {2, 8, 14, 20, 24};
  auto e = ced_decoder_boundary(late);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), StatusCode::kNotSupported);
  EXPECT_NE(e.error().message().find("layer 24 is a KV source after the first decoder layer 20"), std::string::npos)
      << e.error().to_string();
  ModelConfig none = *c;
  for (auto& r : none.compress_ratios)
    if (r == 1) r = 2;
  EXPECT_EQ(ced_decoder_boundary(none).error().code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace strata::model
