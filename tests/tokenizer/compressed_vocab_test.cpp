// Engram's compressed token map against the golden map of the fixture checkpoint, the normalizer on
// hand-picked strings, and the V4.1 tokenizer built from the V3 one (ids and class count).
#include "tokenizer/compressed_vocab.h"

#include <gtest/gtest.h>

#include "tests/support/files.h"

#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/npy.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/v41_tokenizer.h"

namespace strata::tokenizer {
namespace {

using strata::testing::read_all;

std::string fixture(const std::string& rel) { return strata::testing::fixtures_dir() + "/" + rel; }
const std::string kTokenizerJson = "v41-tiny/checkpoint/tokenizer.json";


std::string norm(std::string_view s) {
  auto r = engram_normalize(s);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? r.value() : "";
}

TEST(EngramNormalize, Steps) {
  EXPECT_EQ(norm("Hello"), "hello");
  EXPECT_EQ(norm(" The"), "the");  // strip
  EXPECT_EQ(norm(" "), " ");       // a lone space survives (sentinel)
  EXPECT_EQ(norm("\n\n"), " ");    // collapses to one space, which survives
  EXPECT_EQ(norm("\t \r\n"), " ");
  EXPECT_EQ(norm("\u00a0"), " ");  // NFKC: NBSP -> space
  EXPECT_EQ(norm("\u3000"), " ");  // NFKC: ideographic space -> space
  EXPECT_EQ(norm("\u2028"), "");   // White_Space but not [ \t\r\n]: stripped
  EXPECT_EQ(norm("a  \n b"), "a b");
  EXPECT_EQ(norm("Café"), "cafe");          // NFD + strip marks
  EXPECT_EQ(norm("ﬁ"), "fi");               // NFKC ligature
  EXPECT_EQ(norm("Ａｂｃ"), "abc");         // NFKC fullwidth
  EXPECT_EQ(norm("İstanbul"), "istanbul");  // U+0130 decomposes, the dot is a mark
  EXPECT_EQ(norm("ΣΑΣ"), "σασ");            // per-char lowercase: no final sigma
  EXPECT_EQ(norm("\u0301"), "");            // only a mark
  EXPECT_EQ(norm("<｜User｜>"), "<|user|>");
  EXPECT_EQ(norm("x\ue000y"), "x y");  // the sentinel itself becomes a space
  EXPECT_FALSE(engram_normalize("\xFF").ok());
}

class CompressedVocabFixture : public ::testing::Test {
 protected:
  void SetUp() override { STRATA_REQUIRE_FIXTURE(fixture(kTokenizerJson)); }
};

TEST_F(CompressedVocabFixture, MatchesGoldenMap) {
  const std::string golden_path = fixture("v41-tiny/golden/engram_token_map.npy");
  STRATA_REQUIRE_FIXTURE(golden_path);
  auto tok = Tokenizer::load(fixture(kTokenizerJson));
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  auto cv = build_compressed_vocab(*tok);
  ASSERT_TRUE(cv.ok()) << cv.error().to_string();
  EXPECT_EQ(cv->n_classes, 98627u);
  ASSERT_EQ(cv->map.size(), 128815u);

  strata::testing::Npy npy;
  std::string err;
  ASSERT_TRUE(strata::testing::read_npy(golden_path, &npy, &err)) << err;
  const std::vector<double> golden = npy.to_f64();
  ASSERT_EQ(golden.size(), cv->map.size()) << "dtype " << npy.descr;
  size_t mismatches = 0;
  for (size_t i = 0; i < golden.size(); ++i) {
    if (static_cast<double>(cv->map[i]) != golden[i]) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << "id " << i << " token '" << tok->id_to_token(static_cast<int32_t>(i)) << "': class "
                      << cv->map[i] << ", golden " << golden[i];
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST_F(CompressedVocabFixture, V41Tokenizer) {
  auto json = make_v41_tokenizer_json(read_all(fixture(kTokenizerJson)));
  ASSERT_TRUE(json.ok()) << json.error().to_string();
  auto tok = Tokenizer::from_json(*json, "v41");
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->vocab_size(), kV41VocabSize);
  EXPECT_EQ(tok->model_vocab_size(), 128000);

  // chat-and-api.md §1.
  const std::pair<int32_t, const char*> rows[] = {
      {0, "<｜begin▁of▁sentence｜>"},
      {1, "<｜end▁of▁sentence｜>"},
      {2, "<｜▁pad▁｜>"},
      {128799, "<｜System｜>"},
      {128803, "<｜User｜>"},
      {128804, "<｜Assistant｜>"},
      {128821, "<think>"},
      {128822, "</think>"},
      {128825, "｜DSML｜"},
      {128828, "<｜latest_reminder｜>"},
      {129264, "<｜deepseek_image｜>"},
  };
  for (const auto& [id, text] : rows) {
    EXPECT_EQ(tok->id_to_token(id), text) << id;
    EXPECT_EQ(tok->token_to_id(text), id) << text;
  }
  EXPECT_EQ(tok->id_to_token(128815), "<｜place▁holder▁no▁815｜>");
  EXPECT_EQ(tok->id_to_token(129279), "<｜place▁holder▁no▁1279｜>");
  EXPECT_FALSE(tok->token_to_id("<｜place▁holder▁no▁799｜>").has_value());
  EXPECT_FALSE(tok->is_special(128821));
  EXPECT_FALSE(tok->is_special(128825));
  EXPECT_TRUE(tok->is_special(129264));
  EXPECT_TRUE(tok->is_special(129000));

  // Template text is split at the new tokens.
  const int32_t a = tok->encode("a", false)[0], b = tok->encode("b", false)[0];
  EXPECT_EQ(tok->encode("a<think>b</think>", true), (std::vector<int32_t>{a, 128821, b, 128822}));
  EXPECT_EQ(tok->encode("a<think>", false).size(), 4u);  // client text: "a<think>" stays text
  EXPECT_EQ(tok->encode("<｜DSML｜ calls>", true)[1], 128825);

  auto cv = build_compressed_vocab(*tok);
  ASSERT_TRUE(cv.ok()) << cv.error().to_string();
  EXPECT_EQ(cv->n_classes, 99092u);
  ASSERT_EQ(cv->map.size(), 129280u);

  // The V3 ids keep their class ids, 128799 included: its text changed but it still opens a class
  // of its own at the same point of the id order.
  auto v3 = Tokenizer::load(fixture(kTokenizerJson));
  ASSERT_TRUE(v3.ok());
  auto cv3 = build_compressed_vocab(*v3);
  ASSERT_TRUE(cv3.ok());
  for (size_t i = 0; i < cv3->map.size(); ++i) ASSERT_EQ(cv->map[i], cv3->map[i]) << "id " << i;
}

TEST(V41Tokenizer, RejectsOtherInput) {
  EXPECT_EQ(make_v41_tokenizer_json("not json").error().code(), StatusCode::kCorruption);
  EXPECT_EQ(make_v41_tokenizer_json("{\"model\": {}}").error().code(), StatusCode::kCorruption);
  const auto r = make_v41_tokenizer_json("{\"model\": {\"vocab\": {\"a\": 0}}, \"added_tokens\": []}");
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.error().message().find("128000"), std::string::npos);
}

}  // namespace
}  // namespace strata::tokenizer
