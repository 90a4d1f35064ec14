// Legacy completions logprobs: text_offset counts characters (Unicode code points), not bytes.
#include "server/logprobs_json.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata::server {
namespace {

ApiTokenLogprob tok(std::string text) { return ApiTokenLogprob{std::move(text), -0.5f, {}}; }

TEST(TextOffset, CountsCodePointsNotBytes) {
  EXPECT_EQ(text_offset_chars(""), 0);
  EXPECT_EQ(text_offset_chars("abc"), 3);
  EXPECT_EQ(text_offset_chars("\xC3\xA9"), 1);          // é: 2 bytes
  EXPECT_EQ(text_offset_chars("\xE2\x82\xAC"), 1);      // €: 3 bytes
  EXPECT_EQ(text_offset_chars("\xF0\x9F\x98\x80"), 1);  // 😀: 4 bytes (2 UTF-16 units; we count 1)
  // A character split across tokens counts at the token holding its first byte.
  EXPECT_EQ(text_offset_chars("\xF0\x9F"), 1);
  EXPECT_EQ(text_offset_chars("\x98\x80"), 0);
}

TEST(TextOffset, CompletionLogprobsOffsets) {
  const std::vector<ApiTokenLogprob> ts = {tok("a"), tok("\xC3\xA9"), tok("\xF0\x9F"), tok("\x98\x80"), tok("b")};
  const Json j = completion_logprobs_json(ts, 0);
  EXPECT_EQ(j["text_offset"], Json::parse("[0, 1, 2, 3, 3]"));
  // Continuing a stream from the characters already sent.
  EXPECT_EQ(completion_logprobs_json(std::vector<ApiTokenLogprob>{tok("x"), tok("y")}, 7)["text_offset"],
            Json::parse("[7, 8]"));
}

}  // namespace
}  // namespace strata::server
