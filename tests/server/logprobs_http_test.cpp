// logprobs / top_logprobs end to end over loopback HTTP (tiny synthesized checkpoint, random
// weights): /v1/chat/completions (OpenAI's chat format) and /v1/completions (the legacy format),
// non-streaming and streaming. Every logprob is <= 0; each listed token's text concatenates to the
// returned text; the alternatives are sorted and greedy's token is the top-1 alternative; a stream
// lists the same tokens as the non-streaming answer; without logprobs the field stays null.
#include <gtest/gtest.h>

#include <cmath>

#include "server/logprobs_json.h"
#include "tests/server/api_serve_fixture.h"

namespace strata::server {
namespace {

using namespace testing_api;

class Logprobs : public ApiServe {
 protected:
  static json chat_req(json extra) {
    json b = {{"model", kModel},
              {"max_tokens", 12},
              {"temperature", 0},
              {"thinking", {{"type", "disabled"}}},
              {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }
  static json completion_req(json extra) {
    json b = {{"model", kModel}, {"prompt", "Once upon a time"}, {"max_tokens", 10}, {"temperature", 0}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }
  // The checks every chat entry list must pass; returns the tokens' concatenated text.
  static std::string check_chat_entries(const json& list, size_t top_n, bool greedy) {
    std::string text;
    for (const json& e : list) {
      const std::string token = e["token"];
      text += token;
      EXPECT_LE(e["logprob"].get<double>(), 0.0) << e;
      std::string from_bytes;
      for (const json& b : e["bytes"]) from_bytes += static_cast<char>(b.get<int>());
      EXPECT_EQ(from_bytes, token) << "bytes spell the token (valid UTF-8 here)";
      const json& top = e["top_logprobs"];
      EXPECT_EQ(top.size(), top_n) << e;
      for (size_t k = 0; k < top.size(); ++k) {
        EXPECT_LE(top[k]["logprob"].get<double>(), 0.0);
        if (k > 0) {
          EXPECT_GE(top[k - 1]["logprob"].get<double>(), top[k]["logprob"].get<double>());
        }
      }
      if (greedy && !top.empty()) {
        EXPECT_EQ(top[0]["token"], token) << "greedy's token is the most likely one";
        EXPECT_DOUBLE_EQ(top[0]["logprob"].get<double>(), e["logprob"].get<double>());
      }
    }
    return text;
  }
};

TEST_F(Logprobs, ChatNonStreaming) {
  start();
  const json r = create(chat_req({{"logprobs", true}, {"top_logprobs", 3}}), 200, "/v1/chat/completions");
  const json& ch = r["choices"][0];
  const json& list = ch["logprobs"]["content"];
  ASSERT_TRUE(list.is_array()) << r;
  EXPECT_LE(list.size(), static_cast<size_t>(r["usage"]["completion_tokens"].get<int>()));
  EXPECT_GT(list.size(), 0u);
  EXPECT_EQ(check_chat_entries(list, 3, true), ch["message"]["content"].get<std::string>());
  EXPECT_TRUE(ch["logprobs"]["refusal"].is_null());
  // logprobs without top_logprobs: no alternatives; and not requested: null.
  const json plain = create(chat_req({{"logprobs", true}}), 200, "/v1/chat/completions");
  check_chat_entries(plain["choices"][0]["logprobs"]["content"], 0, true);
  EXPECT_TRUE(create(chat_req({}), 200, "/v1/chat/completions")["choices"][0]["logprobs"].is_null());
}

TEST_F(Logprobs, ChatScriptedTextSkipsTheEndToken) {
  start();
  // A scripted answer (then EOS): the listed tokens spell exactly the content; EOS is not listed.
  const json r =
      create(chat_req({{"logprobs", true}, {"top_logprobs", 2}, {"strata_test_output", "Hello, world!" + kEos}}), 200,
             "/v1/chat/completions");
  const json& list = r["choices"][0]["logprobs"]["content"];
  EXPECT_EQ(check_chat_entries(list, 2, false), "Hello, world!");
  EXPECT_EQ(list.size() + 1, static_cast<size_t>(r["usage"]["completion_tokens"].get<int>()));
  // Thinking on: reasoning tokens are listed apart (reasoning_content), content tokens in content.
  const json t = create(chat_req({{"logprobs", true},
                                  {"thinking", {{"type", "enabled"}}},
                                  {"strata_test_output", "Think.</think>Done." + kEos}}),
                        200, "/v1/chat/completions");
  const json& lp = t["choices"][0]["logprobs"];
  EXPECT_EQ(check_chat_entries(lp["content"], 0, false), "Done.");
  const std::string reasoning = check_chat_entries(lp["reasoning_content"], 0, false);
  EXPECT_EQ(reasoning.rfind("Think.", 0), 0u) << reasoning;  // then </think>'s text
}

TEST_F(Logprobs, ChatStreamingListsTheSameTokens) {
  start();
  const json body = chat_req({{"logprobs", true}, {"top_logprobs", 4}});
  const json whole = create(body, 200, "/v1/chat/completions");
  const std::vector<json> chunks = openai_stream("/v1/chat/completions", body);
  json streamed = json::array();
  std::string content;
  for (const json& c : chunks) {
    const json& ch = c["choices"][0];
    content += ch["delta"].value("content", "");
    if (ch["logprobs"].is_null()) continue;
    for (const json& e : ch["logprobs"]["content"]) streamed.push_back(e);
  }
  // Greedy and the same prompt: the same tokens, the same reports (up to float rounding of JSON).
  const json& want = whole["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(streamed.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(streamed[i]["token"], want[i]["token"]);
    EXPECT_NEAR(streamed[i]["logprob"].get<double>(), want[i]["logprob"].get<double>(), 1e-4);
  }
  EXPECT_EQ(check_chat_entries(streamed, 4, true), content);
}

TEST_F(Logprobs, LegacyCompletions) {
  start();
  const json r = create(completion_req({{"logprobs", 3}}), 200, "/v1/completions");
  const json& ch = r["choices"][0];
  const json& lp = ch["logprobs"];
  const size_t n = lp["tokens"].size();
  ASSERT_GT(n, 0u) << r;
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  std::string text;
  bool exact = true;  // until a token shows U+FFFD (a split character): then the wire text is not the bytes
  for (size_t i = 0; i < n; ++i) {
    if (exact) {
      EXPECT_EQ(lp["text_offset"][i], text_offset_chars(text)) << "character offset of token " << i;
    }
    if (i > 0) {
      EXPECT_GE(lp["text_offset"][i], lp["text_offset"][i - 1]);
    }
    const std::string token = lp["tokens"][i];
    exact = exact && token.find("\xEF\xBF\xBD") == std::string::npos;
    text += token;
    const double l = lp["token_logprobs"][i];
    EXPECT_LE(l, 0.0);
    const json& top = lp["top_logprobs"][i];
    EXPECT_EQ(top.size(), 3u);
    double best = -INFINITY;
    for (auto it = top.begin(); it != top.end(); ++it) best = std::max(best, it.value().get<double>());
    ASSERT_TRUE(top.contains(token)) << "greedy's token is among the top alternatives";
    EXPECT_DOUBLE_EQ(top[token].get<double>(), best);
    EXPECT_DOUBLE_EQ(l, best);
  }
  EXPECT_EQ(text, ch["text"].get<std::string>());
  // Streamed: the chunks' tokens and offsets continue each other.
  const std::vector<json> chunks = openai_stream("/v1/completions", completion_req({{"logprobs", 1}}));
  std::vector<std::string> tokens;
  std::string streamed_text;
  for (const json& c : chunks) {
    if (c["choices"].empty()) continue;
    const json& sch = c["choices"][0];
    streamed_text += sch["text"].get<std::string>();
    if (sch["logprobs"].is_null()) continue;
    for (size_t i = 0; i < sch["logprobs"]["tokens"].size(); ++i) {
      // The stream's offsets continue each other: the same as the whole answer's.
      EXPECT_EQ(sch["logprobs"]["text_offset"][i], lp["text_offset"][tokens.size()]);
      tokens.push_back(sch["logprobs"]["tokens"][i]);
    }
  }
  EXPECT_EQ(tokens, lp["tokens"].get<std::vector<std::string>>());
  EXPECT_EQ(streamed_text, text);
  // Not requested: null.
  EXPECT_TRUE(create(completion_req({}), 200, "/v1/completions")["choices"][0]["logprobs"].is_null());
}

// text_offset counts characters (code points), not bytes: a scripted answer with 2-, 3- and 4-byte
// characters ends at its character count.
TEST_F(Logprobs, LegacyCompletionsTextOffsetCountsCharacters) {
  start();
  const std::string answer = "a\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 b";  // "aé € 😀 b": 7 characters, 12 bytes
  const json r =
      create(completion_req({{"logprobs", 0}, {"strata_test_output", answer + kEos}}), 200, "/v1/completions");
  const json& ch = r["choices"][0];
  ASSERT_EQ(ch["text"], answer);
  const json& lp = ch["logprobs"];
  const size_t n = lp["tokens"].size();
  ASSERT_GT(n, 1u) << r;
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (size_t i = 1; i < n; ++i) EXPECT_GE(lp["text_offset"][i], lp["text_offset"][i - 1]);
  // The last token starts at most one character before the end, never at a byte offset.
  const int64_t last = lp["text_offset"][n - 1];
  EXPECT_LE(last, 7);
  EXPECT_GE(last, 6);
}

}  // namespace
}  // namespace strata::server
