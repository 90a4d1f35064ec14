// server/responses_output.h: the /v1/responses bodies from chat::OutputParser output. The stream's
// events follow the Responses lifecycle (created, in_progress, per item added / part added /
// deltas / done, completed) with growing sequence numbers; the final response repeats the streamed
// items; length is status incomplete; the stored assistant message carries reasoning, text and calls.
#include "server/responses_output.h"

#include <gtest/gtest.h>

#include "tests/chat/v41_tokenizer.h"

namespace strata::server {
namespace {

const std::string kToolScript =
    "Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
    "name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

struct Event {
  std::string type;
  Json data;
};

std::vector<Event> split(const std::string& s) {
  std::vector<Event> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t end = s.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string ev = s.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    Event e{ev.substr(7, nl - 7), Json::parse(ev.substr(nl + 7))};
    EXPECT_EQ(e.data["type"], e.type);
    out.push_back(std::move(e));
  }
  return out;
}

chat::ParserOptions parser_options(chat::ParseStart start, bool tools) {
  chat::ParserOptions o;
  o.start = start;
  o.tools = tools;
  return o;
}

// Streams `text` through a parser (one byte at a time) into a ResponsesStream.
std::string stream_of(chat::OutputParser& p, const std::string& text, bool length, const JobStats& st) {
  ResponsesStream s({"resp_1", 100, "deepseek-v4.1-flash", Json::object()});
  std::string out = s.start();
  std::vector<chat::Delta> ds;
  bool ended = false;
  for (size_t i = 0; i < text.size() && !ended; ++i) ended = p.push_text(text.substr(i, 1), &ds);
  if (!ended) p.finish(length, &ds);
  for (const chat::Delta& d : ds) out += s.delta(d);
  return out + s.finish(p, st, 4);
}

#define REQUIRE_TOKENIZER() \
  if (!testing::v41_tokenizer()) GTEST_SKIP() << "fixture tokenizer missing: " << testing::v3_tokenizer_path()

TEST(ResponsesStream, ReasoningThenFunctionCallLifecycle) {
  REQUIRE_TOKENIZER();
  chat::OutputParser p(*testing::v41_tokenizer(), parser_options(chat::ParseStart::kReasoning, true));
  const JobStats st{.prompt_tokens = 20, .cached_tokens = 5, .completion_tokens = 30};
  const std::vector<Event> ev = split(stream_of(p, kToolScript, false, st));
  std::vector<std::string> types;
  for (size_t i = 0; i < ev.size(); ++i) {
    types.push_back(ev[i].type);
    EXPECT_EQ(ev[i].data["sequence_number"], i);
  }
  // The delta runs collapsed.
  std::vector<std::string> lifecycle;
  for (const std::string& t : types)
    if (lifecycle.empty() || lifecycle.back() != t) lifecycle.push_back(t);
  EXPECT_EQ(lifecycle,
            (std::vector<std::string>{
                "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
                "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
                "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
                "response.function_call_arguments.done", "response.output_item.done", "response.completed"}));
  EXPECT_EQ(ev[0].data["response"]["status"], "in_progress");
  std::string reasoning, args;
  for (const Event& e : ev) {
    if (e.type == "response.reasoning_text.delta") reasoning += e.data["delta"].get<std::string>();
    if (e.type == "response.function_call_arguments.delta") {
      EXPECT_EQ(e.data["output_index"], 1);
      args += e.data["delta"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, "Need data.");
  EXPECT_EQ(Json::parse(args), Json::parse(R"({"location":"Paris"})"));
  const Json& r = ev.back().data["response"];
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 2u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Need data.");
  EXPECT_EQ(r["output"][1]["type"], "function_call");
  EXPECT_EQ(r["output"][1]["name"], "get_weather");
  EXPECT_EQ(r["output"][1]["call_id"], p.tool_calls()[0].id);
  EXPECT_EQ(r["output"][1]["arguments"], args);
  // The items' ids are the ones the added events announced.
  EXPECT_EQ(r["output"][1]["id"], ev[8].data["item"]["id"]);
  EXPECT_EQ(r["usage"]["input_tokens"], 20);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 5);
  EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 4);
  // The stored message for previous_response_id.
  const chat::Message m = responses_output_message(p);
  EXPECT_EQ(m.role, chat::Role::kAssistant);
  EXPECT_EQ(m.reasoning, "Need data.");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments["location"], "Paris");
}

TEST(ResponsesStream, TextAndIncomplete) {
  REQUIRE_TOKENIZER();
  const JobStats st{.prompt_tokens = 3, .cached_tokens = 0, .completion_tokens = 2};
  chat::OutputParser p(*testing::v41_tokenizer(), parser_options(chat::ParseStart::kContent, false));
  std::vector<Event> ev = split(stream_of(p, "Hello there", true, st));
  std::string text;
  for (const Event& e : ev)
    if (e.type == "response.output_text.delta") text += e.data["delta"].get<std::string>();
  EXPECT_EQ(text, "Hello there");
  EXPECT_EQ(ev.back().type, "response.incomplete");
  EXPECT_EQ(ev.back().data["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(ev.back().data["response"]["output"][0]["content"][0]["text"], "Hello there");
  // The message max_output_tokens cut is incomplete, in its done event and in the response.
  EXPECT_EQ(ev.back().data["response"]["output"][0]["status"], "incomplete");
  for (const Event& e : ev)
    if (e.type == "response.output_item.done") EXPECT_EQ(e.data["item"]["status"], "incomplete");
  // Non-streaming: the same shape.
  const Json r = Json::parse(responses_json({"resp_2", 100, "m", Json{{"store", false}}}, p, st, 0));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["store"], false) << "request fields are echoed";
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["role"], "assistant");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0],
            Json::parse(R"({"type":"output_text","text":"Hello there","annotations":[]})"));
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
}

TEST(ResponsesStream, ErrorEventCarriesTheErrorObject) {
  ResponsesStream s({"resp_1", 1, "m", Json::object()});
  const std::vector<Event> ev = split(s.error(unavailable("the server is shutting down", "server_shutdown")));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, "error");
  EXPECT_EQ(ev[0].data["code"], "server_shutdown");
  EXPECT_EQ(ev[0].data["error"]["type"], "server_error");
}

}  // namespace
}  // namespace strata::server
