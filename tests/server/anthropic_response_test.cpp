// server/anthropic_response.h: the /v1/messages bodies from chat::OutputParser output. The stream
// follows Anthropic's event lifecycle exactly (message_start, one start/delta.../stop per block with
// consecutive indices, message_delta, message_stop), tool input fragments concatenate to the final
// input, and stop_reason / stop_sequence / usage match the non-streaming message.
#include "server/anthropic_response.h"

#include <gtest/gtest.h>

#include "tests/chat/v41_tokenizer.h"

namespace strata::server {
namespace {

const std::string kToolScript =
    "Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
    "name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" "
    "string=\"false\">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

struct Event {
  std::string type;
  Json data;
};

// Splits "event: T\ndata: J\n\n" events; every event must have both lines and agree on its type.
std::vector<Event> split(const std::string& s) {
  std::vector<Event> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t end = s.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event: " << s.substr(pos);
    if (end == std::string::npos) break;
    const std::string ev = s.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    Event e{ev.substr(7, nl - 7), Json::parse(ev.substr(nl + 7))};
    EXPECT_EQ(e.data["type"], e.type);
    out.push_back(std::move(e));
  }
  return out;
}

// Feeds `text` to a parser (one byte at a time: every split point), streaming its deltas through an
// AnthropicStream; returns the events and leaves the parser finished.
std::string stream_of(chat::OutputParser& p, const std::string& text, bool length, JobStats st) {
  AnthropicStream s({"msg_1", "deepseek-v4.1-flash"});
  std::string out = s.start(st.prompt_tokens, st.cached_tokens);
  std::vector<chat::Delta> ds;
  bool ended = false;
  for (size_t i = 0; i < text.size() && !ended; ++i) ended = p.push_text(text.substr(i, 1), &ds);
  if (!ended) p.finish(length, &ds);
  for (const chat::Delta& d : ds) out += s.delta(d);
  return out + s.finish(p, st);
}

chat::ParserOptions parser_options(chat::ParseStart start, bool tools) {
  chat::ParserOptions o;
  o.start = start;
  o.tools = tools;
  o.make_call_id = [] { return std::string("toolu_x"); };
  return o;
}

#define REQUIRE_TOKENIZER() \
  if (!testing::v41_tokenizer()) GTEST_SKIP() << "fixture tokenizer missing: " << testing::v3_tokenizer_path()

TEST(AnthropicStream, ThinkingThenToolUseLifecycle) {
  REQUIRE_TOKENIZER();
  chat::OutputParser p(*testing::v41_tokenizer(), parser_options(chat::ParseStart::kReasoning, true));
  const JobStats st{.prompt_tokens = 20, .cached_tokens = 5, .completion_tokens = 30};
  const std::vector<Event> ev = split(stream_of(p, kToolScript, false, st));
  ASSERT_GE(ev.size(), 8u);
  EXPECT_EQ(ev.front().type, "message_start");
  EXPECT_EQ(ev.front().data["message"]["usage"]["input_tokens"], 15);
  EXPECT_EQ(ev.front().data["message"]["usage"]["cache_read_input_tokens"], 5);
  EXPECT_EQ(ev.front().data["message"]["content"], Json::array());
  // Blocks: start, deltas, stop; indices 0, 1, ...; a delta only inside its open block.
  std::vector<std::string> kinds;
  std::string thinking, input;
  int open = -1;
  for (size_t i = 1; i + 2 < ev.size(); ++i) {
    const Json& d = ev[i].data;
    if (ev[i].type == "content_block_start") {
      EXPECT_EQ(open, -1) << "a block started inside another";
      open = d["index"];
      EXPECT_EQ(open, static_cast<int>(kinds.size()));
      kinds.push_back(d["content_block"]["type"]);
    } else if (ev[i].type == "content_block_delta") {
      EXPECT_EQ(d["index"], open);
      if (d["delta"]["type"] == "thinking_delta") thinking += d["delta"]["thinking"].get<std::string>();
      if (d["delta"]["type"] == "input_json_delta") input += d["delta"]["partial_json"].get<std::string>();
    } else {
      EXPECT_EQ(ev[i].type, "content_block_stop");
      EXPECT_EQ(d["index"], open);
      open = -1;
    }
  }
  EXPECT_EQ(open, -1) << "a block was left open";
  EXPECT_EQ(kinds, (std::vector<std::string>{"thinking", "tool_use"}));
  EXPECT_EQ(thinking, "Need data.");
  EXPECT_EQ(Json::parse(input), Json::parse(R"({"location":"Paris","days":3})"));
  const Event& md = ev[ev.size() - 2];
  EXPECT_EQ(md.type, "message_delta");
  EXPECT_EQ(md.data["delta"]["stop_reason"], "tool_use");
  EXPECT_TRUE(md.data["delta"]["stop_sequence"].is_null());
  EXPECT_EQ(md.data["usage"]["output_tokens"], 30);
  EXPECT_EQ(ev.back().type, "message_stop");
  // The non-streaming message says the same.
  const Json m = Json::parse(anthropic_message_json({"msg_1", "deepseek-v4.1-flash"}, p, st));
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 2u);
  EXPECT_EQ(m["content"][0], Json::parse(R"({"type":"thinking","thinking":"Need data.","signature":""})"));
  EXPECT_EQ(m["content"][1]["type"], "tool_use");
  EXPECT_EQ(m["content"][1]["id"], "toolu_x");
  EXPECT_EQ(m["content"][1]["name"], "get_weather");
  EXPECT_EQ(m["content"][1]["input"], Json::parse(R"({"location":"Paris","days":3})"));
  EXPECT_EQ(
      m["usage"],
      Json::parse(
          R"({"input_tokens":15,"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"output_tokens":30})"));
}

TEST(AnthropicStream, TextStopReasons) {
  REQUIRE_TOKENIZER();
  const JobStats st{.prompt_tokens = 3, .cached_tokens = 0, .completion_tokens = 4};
  // A stop sequence: stop_reason stop_sequence naming it.
  chat::ParserOptions o = parser_options(chat::ParseStart::kContent, false);
  o.stop = {"END", "##"};
  chat::OutputParser p(*testing::v41_tokenizer(), o);
  std::vector<Event> ev = split(stream_of(p, "Hello ## more", false, st));
  std::string text;
  for (const Event& e : ev)
    if (e.type == "content_block_delta") text += e.data["delta"]["text"].get<std::string>();
  EXPECT_EQ(text, "Hello ");
  EXPECT_EQ(ev[1].data["content_block"], Json::parse(R"({"type":"text","text":""})"));
  EXPECT_EQ(ev[ev.size() - 2].data["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(ev[ev.size() - 2].data["delta"]["stop_sequence"], "##");
  const Json m = Json::parse(anthropic_message_json({"msg_1", "m"}, p, st));
  EXPECT_EQ(m["stop_sequence"], "##");
  EXPECT_EQ(m["content"], Json::parse(R"([{"type":"text","text":"Hello "}])"));
  // max_tokens inside reasoning: only a thinking block, stop_reason max_tokens.
  chat::OutputParser q(*testing::v41_tokenizer(), parser_options(chat::ParseStart::kReasoning, false));
  ev = split(stream_of(q, "Let me think", true, st));
  EXPECT_EQ(ev[1].data["content_block"]["type"], "thinking");
  EXPECT_EQ(ev[ev.size() - 2].data["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(anthropic_stop_reason(q), "max_tokens");
}

TEST(AnthropicStream, EmptyDeltasWriteNothingAndErrorsAreEvents) {
  AnthropicStream s({"msg_1", "m"});
  chat::Delta d;
  d.kind = chat::Delta::Kind::kContent;
  EXPECT_EQ(s.delta(d), "");
  d.kind = chat::Delta::Kind::kToolCallArguments;
  d.text = "{";
  EXPECT_EQ(s.delta(d), "") << "arguments outside a tool_use block are dropped";
  const std::vector<Event> ev =
      split(AnthropicStream::error(unavailable("the server is shutting down", "server_shutdown")));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, "error");
  EXPECT_EQ(ev[0].data["error"]["type"], "api_error");
  EXPECT_EQ(anthropic_count_tokens_json(42), R"({"input_tokens":42})");
}

}  // namespace
}  // namespace strata::server
