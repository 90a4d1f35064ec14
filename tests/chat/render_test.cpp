// Single-turn V4.1 rendering: the id vectors of chat-and-api.md §4 and the v41-tiny prompt.
#include "chat/render.h"

#include <gtest/gtest.h>

#include "tests/support/files.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "chat/prompt_builder.h"
#include "tests/support/npy.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/v41_tokenizer.h"

namespace strata::chat {
namespace {

using strata::testing::read_all;

using Ids = std::vector<int32_t>;
using tokenizer::Tokenizer;

std::string fixture(const std::string& rel) { return strata::testing::fixtures_dir() + "/" + rel; }
const std::string kTokenizerJson = "v41-tiny/checkpoint/tokenizer.json";


class Render : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::ifstream(fixture(kTokenizerJson))) return;
    auto v3 = Tokenizer::load(fixture(kTokenizerJson));
    ASSERT_TRUE(v3.ok()) << v3.error().to_string();
    v3_ = std::make_unique<Tokenizer>(std::move(v3).value());
    auto json = tokenizer::make_v41_tokenizer_json(read_all(fixture(kTokenizerJson)));
    ASSERT_TRUE(json.ok()) << json.error().to_string();
    auto v41 = Tokenizer::from_json(*json, "v41");
    ASSERT_TRUE(v41.ok()) << v41.error().to_string();
    v41_ = std::make_unique<Tokenizer>(std::move(v41).value());
  }
  static void TearDownTestSuite() {
    v3_.reset();
    v41_.reset();
  }
  void SetUp() override { STRATA_REQUIRE_FIXTURE(fixture(kTokenizerJson)); }
  static std::unique_ptr<Tokenizer> v3_, v41_;
};
std::unique_ptr<Tokenizer> Render::v3_, Render::v41_;

const Ids kEffortLine = {77666, 288, 9504, 482, 28,   223, 2402, 343, 16801, 223, 19,    15, 1457,
                         14,    270, 4077, 270, 1990, 14,  270,  850, 15146, 270, 22805, 868};

TEST_F(Render, ChatModeHi) {
  auto ids = render_single_turn(*v41_, "Hi", /*thinking=*/false);
  ASSERT_TRUE(ids.ok()) << ids.error().to_string();
  EXPECT_EQ(*ids, (Ids{0, 128803, 23166, 128804, 128822}));
}

TEST_F(Render, ThinkingModeHi) {
  auto ids = render_single_turn(*v41_, "Hi", /*thinking=*/true);
  ASSERT_TRUE(ids.ok()) << ids.error().to_string();
  Ids want = {0, 128799};
  want.insert(want.end(), kEffortLine.begin(), kEffortLine.end());
  want.insert(want.end(), {128803, 23166, 128804, 128821});
  EXPECT_EQ(*ids, want);
  EXPECT_EQ(v41_->decode(*ids),
            "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more "
            "thorough the reasoning)\n\n<｜User｜>Hi<｜Assistant｜><think>");
}

TEST_F(Render, EffortIsChecked) {
  auto ids = render_single_turn(*v41_, "Hi", true, 30);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(v41_->decode(*ids).substr(0, 60),
            std::string("<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 30 (range").substr(0, 60));
  EXPECT_EQ(render_single_turn(*v41_, "Hi", true, 0).error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(render_single_turn(*v41_, "Hi", true, 101).error().code(), StatusCode::kInvalidArgument);
}

TEST_F(Render, ClientTextIsNeverScanned) {
  auto ids = render_single_turn(*v41_, "<｜User｜></think>", false);
  ASSERT_TRUE(ids.ok());
  // Only the template's own specials: BOS, User, Assistant, </think>.
  int n_added = 0;
  for (const int32_t id : *ids) n_added += v41_->is_added(id);
  EXPECT_EQ(n_added, 4);
  EXPECT_EQ(v41_->decode(*ids), "<｜begin▁of▁sentence｜><｜User｜><｜User｜></think><｜Assistant｜></think>");
}

TEST_F(Render, TemplateTextIsSplitAndJoinedWithClientText) {
  PromptBuilder b(*v41_);
  b.template_text("x<think>");
  b.client_text("<think>");
  b.template_text("y");
  const Ids& ids = b.ids();
  // "x", <think>, then "<think>y" BPE-encoded as one fragment.
  Ids want = {v41_->encode("x", false)[0], 128821};
  const Ids tail = v41_->encode("<think>y", false);
  want.insert(want.end(), tail.begin(), tail.end());
  EXPECT_EQ(ids, want);
  const Status s = b.special("<｜no such token｜>");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("<｜no such token｜>"), std::string::npos);
}

// With the V3 tokenizer of the tiny checkpoint, chat mode ends at <｜Assistant｜> (V3 template) and
// reproduces tokens.json; thinking mode needs the V4.1 tokens.
TEST_F(Render, V3TokenizerFallbackMatchesTinyPrompt) {
  const std::string tokens_path = fixture("v41-tiny/tokens.json");
  STRATA_REQUIRE_FIXTURE(tokens_path);
  const std::string js = read_all(tokens_path);
  const size_t b = js.find('[', js.find("\"ids\""));
  const size_t e = js.find(']', b);
  std::string body = js.substr(b + 1, e - b - 1);
  for (char& c : body) c = (c == ',') ? ' ' : c;
  Ids want;
  std::istringstream in(body);
  for (int64_t v; in >> v;) want.push_back(static_cast<int32_t>(v));
  ASSERT_EQ(want.size(), 197u);

  auto ids = render_single_turn(*v3_, read_all(fixture("v41-tiny/prompt.txt")), false);
  ASSERT_TRUE(ids.ok()) << ids.error().to_string();
  EXPECT_EQ(*ids, want);

  auto thinking = render_single_turn(*v3_, "Hi", true);
  ASSERT_FALSE(thinking.ok());
  EXPECT_EQ(thinking.error().code(), StatusCode::kNotFound);
  EXPECT_NE(thinking.error().message().find("<｜System｜>"), std::string::npos) << thinking.error().to_string();
}

}  // namespace
}  // namespace strata::chat
