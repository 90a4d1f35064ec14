// The renderer goldens of fixtures/chat/render_cases.json (DeepSeek's official V4.1 encoder output,
// inputs as OpenAI messages): each case goes through the server's request parsing (messages, tools)
// and chat::render_conversation, and must match the expected string byte for byte and its token
// ids (the V4.1 tokenizer's encoding of the expected text, special tokens included).
#include <gtest/gtest.h>

#include <fstream>

#include "chat/render.h"
#include "server/chat_request.h"
#include "tests/chat/v41_tokenizer.h"
#include "tests/support/files.h"
#include "tests/support/npy.h"

namespace strata::server {
namespace {

const std::string kCases = std::string(STRATA_FIXTURES_DIR) + "/chat/render_cases.json";

TEST(RenderCases, MatchOfficialEncoder) {
  STRATA_REQUIRE_FIXTURE(kCases);
  const tokenizer::Tokenizer* tok = testing::v41_tokenizer();
  if (!tok) GTEST_SKIP() << "fixture missing: " << testing::v3_tokenizer_path();
  const Json doc = Json::parse(testing::read_all(kCases), nullptr, false);
  ASSERT_TRUE(doc.is_object() && doc.contains("cases"));
  ASSERT_GE(doc["cases"].size(), 7u);
  for (const Json& c : doc["cases"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    std::vector<chat::Message> messages;
    ApiError e = parse_messages_json(c, &messages);
    ASSERT_TRUE(e.ok()) << e.to_json();
    chat::RenderOptions o;
    o.thinking = c.value("thinking", false);
    o.add_generation_prompt = c.value("add_generation_prompt", true);
    e = parse_tools_json(c, &o);
    ASSERT_TRUE(e.ok()) << e.to_json();
    if (c.contains("reasoning_effort")) {
      e = parse_effort(c["reasoning_effort"], EffortTable::kOfficial, "reasoning_effort", &o.reasoning_effort);
      ASSERT_TRUE(e.ok()) << e.to_json();
    }
    auto r = chat::render_conversation(*tok, messages, o);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    const std::string expected = c["expected"].get<std::string>();
    EXPECT_EQ(r->text, expected);
    EXPECT_EQ(r->ids, tok->encode(expected, /*allow_special=*/true));
    EXPECT_EQ(r->ids.front(), 0);
  }
}

}  // namespace
}  // namespace strata::server
