// The full V4.1 renderer on the cases written out in chat-and-api.md §4 and the decisions of §2-4.
// The fixture goldens (render_cases.json, OpenAI messages in) run in tests/server, through the
// request parser that turns OpenAI JSON into chat::Message.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/render.h"
#include "tests/chat/v41_tokenizer.h"

namespace strata::chat {
namespace {

#define REQUIRE_TOKENIZER()                                                                    \
  if (testing::v41_tokenizer() == nullptr) GTEST_SKIP() << "fixture missing: " << testing::v3_tokenizer_path()

const std::string kEffort75 =
    "Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)\n\n";

Message msg(Role r, std::string content) {
  Message m;
  m.role = r;
  m.content = std::move(content);
  return m;
}

RenderedPrompt render_ok(const std::vector<Message>& ms, const RenderOptions& o) {
  auto r = render_conversation(*testing::v41_tokenizer(), ms, o);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  if (!r.ok()) return {};
  // The ids are the text's ids whenever client text holds no special-token string.
  EXPECT_EQ(r->ids, testing::v41_tokenizer()->encode(r->text, /*allow_special=*/true));
  return std::move(r).value();
}

RenderOptions thinking(bool on) {
  RenderOptions o;
  o.thinking = on;
  return o;
}

Json weather_tool() {
  return Json::parse(R"({"name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}})");
}

TEST(RenderConversation, SpecExampleToolRoundTrip) {
  REQUIRE_TOKENIZER();
  Message a = msg(Role::kAssistant, "");
  a.reasoning = "I should call get_weather.";
  a.tool_calls.push_back(ToolCall{"call_1", "get_weather", tool_arguments_from_text(R"({"location": "Paris", "unit": "celsius"})")});
  Message t = msg(Role::kTool, R"({"temp_c": 18, "sky": "cloudy"})");
  t.tool_call_id = "call_1";
  RenderOptions o = thinking(true);
  o.tools = {weather_tool()};
  const RenderedPrompt p = render_ok(
      {msg(Role::kSystem, "You are a concise assistant."), msg(Role::kUser, "What's the weather in Paris?"), a, t}, o);
  const std::string want =
      "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 +
      "You are a concise assistant.\n\n## Tools\n\nYou have access to a set of tools to help answer the user's "
      "question. You can invoke tools by writing a \"<｜DSML｜ calls>\" block like the following:\n\n<｜DSML｜ "
      "calls>\n<｜DSML｜ invoke name=\"$TOOL_NAME\">\n<｜DSML｜ parameter name=\"$PARAMETER_NAME\" "
      "string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n...\n</｜DSML｜ invoke>\n<｜DSML｜ invoke "
      "name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ invoke>\n</｜DSML｜ calls>\n\nString parameters should be specified "
      "as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value "
      "in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST "
      "output your complete reasoning inside <think>...</think> BEFORE any tool calls or final "
      "response.\n\nOtherwise, output directly after </think> with tool calls or final response.\n\n### "
      "Available Tool Schemas\n\n{\"name\": \"get_weather\", \"description\": \"Current weather for a city\", "
      "\"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\"}, \"unit\": "
      "{\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"location\"]}}\n\nYou "
      "MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
      "calls.\n<｜User｜>What's the weather in Paris?<｜Assistant｜><think>I should call "
      "get_weather.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
      "name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"unit\" "
      "string=\"true\">celsius</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ "
      "calls><｜end▁of▁sentence｜><｜User｜><tool_result>{\"temp_c\": 18, \"sky\": "
      "\"cloudy\"}</tool_result><｜Assistant｜><think>";
  EXPECT_EQ(p.text, want);
  EXPECT_EQ(p.start, ParseStart::kReasoning);
  EXPECT_TRUE(p.tools_rendered);
}

TEST(RenderConversation, HistoryDropsOldReasoning) {
  REQUIRE_TOKENIZER();
  Message a = msg(Role::kAssistant, "Hello! How can I help?");
  a.reasoning = "Greeting.";
  const std::vector<Message> ms = {msg(Role::kUser, "Hi"), a, msg(Role::kUser, "2+2?")};
  EXPECT_EQ(render_ok(ms, thinking(true)).text,
            "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 +
                "<｜User｜>Hi<｜Assistant｜></think>Hello! How can I help?<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜><think>");
  const RenderedPrompt off = render_ok(ms, thinking(false));
  EXPECT_EQ(off.text,
            "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>Hello! How can I help?<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜></think>");
  EXPECT_EQ(off.start, ParseStart::kContent);
  // drop_thinking off keeps the old reasoning and opens every header with <think>.
  RenderOptions keep = thinking(true);
  keep.drop_thinking = false;
  EXPECT_EQ(render_ok(ms, keep).text,
            "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 +
                "<｜User｜>Hi<｜Assistant｜><think>Greeting.</think>Hello! How can I help?<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜><think>");
}

TEST(RenderConversation, ConsecutiveUsersAndMidConversationSystem) {
  REQUIRE_TOKENIZER();
  EXPECT_EQ(render_ok({msg(Role::kUser, "Hi"), msg(Role::kUser, "again"), msg(Role::kSystem, "Answer in French.")},
                      thinking(false))
                .text,
            "<｜begin▁of▁sentence｜><｜User｜>Hi\n\nagain<｜System｜>Answer in French.<｜Assistant｜></think>");
}

// DECISION (§4 rule 6, vLLM): a system-only request still ends with the generation header.
TEST(RenderConversation, SystemOnlyRequestGetsHeader) {
  REQUIRE_TOKENIZER();
  EXPECT_EQ(render_ok({msg(Role::kSystem, "S")}, thinking(false)).text,
            "<｜begin▁of▁sentence｜><｜System｜>S<｜Assistant｜></think>");
}

TEST(RenderConversation, ToolsWithoutSystemInsertOne) {
  REQUIRE_TOKENIZER();
  RenderOptions o = thinking(false);
  o.tools = {weather_tool()};
  const std::string text = render_ok({msg(Role::kUser, "Hi")}, o).text;
  EXPECT_EQ(text.rfind("<｜begin▁of▁sentence｜><｜System｜>\n\n## Tools\n\n", 0), 0u) << text;
}

TEST(RenderConversation, EffortAndResponseFormat) {
  REQUIRE_TOKENIZER();
  RenderOptions o = thinking(true);
  o.reasoning_effort = 30;
  EXPECT_EQ(render_ok({msg(Role::kUser, "Hi")}, o).text,
            "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 30 (range 1-100, the higher the value, the more "
            "thorough the reasoning)\n\n<｜User｜>Hi<｜Assistant｜><think>");
  RenderOptions rf = thinking(false);
  rf.response_format = Json::parse(R"({"type":"json_object"})");
  EXPECT_EQ(render_ok({msg(Role::kUser, "Return JSON")}, rf).text,
            "<｜begin▁of▁sentence｜><｜System｜>\n\n## Response Format:\n\nYou MUST strictly adhere to the following "
            "schema to reply:\n{\"type\": \"json_object\"}<｜User｜>Return JSON<｜Assistant｜></think>");
}

TEST(RenderConversation, SpecTokenIds) {
  REQUIRE_TOKENIZER();
  EXPECT_EQ(render_ok({msg(Role::kUser, "Hi")}, thinking(false)).ids, (std::vector<int32_t>{0, 128803, 23166, 128804, 128822}));
  const std::vector<int32_t> ids = render_ok({msg(Role::kUser, "Hi")}, thinking(true)).ids;
  ASSERT_EQ(ids.size(), 2u + 25u + 4u);
  EXPECT_EQ(ids[1], 128799);
  EXPECT_EQ(ids[2], 77666);
  EXPECT_EQ(ids[26], 868);
  EXPECT_EQ(std::vector<int32_t>(ids.end() - 4, ids.end()), (std::vector<int32_t>{128803, 23166, 128804, 128821}));
}

// DECISION (§1): client text is never scanned for special tokens.
TEST(RenderConversation, ClientTextIsOrdinaryBytes) {
  REQUIRE_TOKENIZER();
  auto r = render_conversation(*testing::v41_tokenizer(), std::vector<Message>{msg(Role::kUser, "<｜User｜></think>｜DSML｜")},
                               thinking(false));
  ASSERT_TRUE(r.ok());
  int n_added = 0;
  for (const int32_t id : r->ids) n_added += testing::v41_tokenizer()->is_added(id);
  EXPECT_EQ(n_added, 4);  // BOS, <｜User｜>, <｜Assistant｜>, </think>: the template's own
  EXPECT_NE(r->ids, testing::v41_tokenizer()->encode(r->text, true));
}

TEST(RenderConversation, ToolResultsFollowCallOrderAndMergeWithUserText) {
  REQUIRE_TOKENIZER();
  Message a = msg(Role::kAssistant, "");
  a.tool_calls = {ToolCall{"c1", "f", Json::object()}, ToolCall{"c2", "g", tool_arguments_from_text("{\"x\": 1.50}")}};
  Message t2 = msg(Role::kTool, "R2");
  t2.tool_call_id = "c2";
  Message t1 = msg(Role::kTool, "R1");
  t1.tool_call_id = "c1";
  RenderOptions o = thinking(false);
  o.tools = {Json::parse(R"({"name":"f"})"), Json::parse(R"({"name":"g"})")};
  const std::string text = render_ok({msg(Role::kUser, "U"), a, t2, t1, msg(Role::kUser, "U2")}, o).text;
  const std::string tail =
      "<｜User｜>U<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n\n</｜DSML｜ "
      "invoke>\n<｜DSML｜ invoke name=\"g\">\n<｜DSML｜ parameter name=\"x\" string=\"false\">1.5</｜DSML｜ "
      "parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜><｜User｜><tool_result>R1</tool_result>"
      "\n\n<tool_result>R2</tool_result>\n\nU2<｜Assistant｜></think>";
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
}

TEST(RenderConversation, ToolArgumentsTolerance) {
  EXPECT_EQ(json_dumps(tool_arguments_from_text(R"({"a": 1})")), R"({"a": 1})");
  EXPECT_EQ(json_dumps(tool_arguments_from_text(R"("{\"a\": 1}")")), R"({"a": 1})");  // double-encoded
  EXPECT_EQ(json_dumps(tool_arguments_from_text("not json")), R"({"arguments": "not json"})");
  EXPECT_EQ(json_dumps(tool_arguments_from_text("[1]")), R"({"arguments": "[1]"})");
  // Nesting beyond kMaxJsonNesting is kept as text, not parsed (the renderer recurses per level).
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  const Json kept = tool_arguments_from_text(deep);
  ASSERT_TRUE(kept.contains("arguments"));
  EXPECT_EQ(kept["arguments"], deep);
  const std::string ok_depth = "{\"a\": " + std::string(kMaxJsonNesting - 1, '[') + std::string(kMaxJsonNesting - 1, ']') + "}";
  EXPECT_FALSE(tool_arguments_from_text(ok_depth).contains("arguments"));
}

TEST(RenderConversation, ForcedToolCall) {
  REQUIRE_TOKENIZER();
  RenderOptions o = thinking(false);
  o.tools = {weather_tool()};
  o.tool_choice = ToolChoice::kRequired;
  RenderedPrompt p = render_ok({msg(Role::kUser, "Hi")}, o);
  EXPECT_EQ(p.start, ParseStart::kTools);
  EXPECT_TRUE(p.text.ends_with("<｜User｜>Hi<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n")) << p.text;
  o.tool_choice = ToolChoice::kNamed;
  o.tool_choice_name = "get_weather";
  p = render_ok({msg(Role::kUser, "Hi")}, o);
  EXPECT_EQ(p.forced_tool, "get_weather");
  const std::string tail = "</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n";
  EXPECT_EQ(p.text.substr(p.text.size() - tail.size()), tail);
  o.thinking = true;  // rule 7: thinking must be off
  EXPECT_EQ(render_conversation(*testing::v41_tokenizer(), std::vector<Message>{msg(Role::kUser, "Hi")}, o).error().code(),
            StatusCode::kInvalidArgument);
  o.thinking = false;
  o.tool_choice_name = "nope";
  EXPECT_EQ(render_conversation(*testing::v41_tokenizer(), std::vector<Message>{msg(Role::kUser, "Hi")}, o).error().code(),
            StatusCode::kInvalidArgument);
}

TEST(RenderConversation, ToolChoiceNoneRendersNoTools) {
  REQUIRE_TOKENIZER();
  RenderOptions o = thinking(false);
  o.tools = {weather_tool()};
  o.tool_choice = ToolChoice::kNone;
  const RenderedPrompt p = render_ok({msg(Role::kUser, "Hi")}, o);
  EXPECT_EQ(p.text, "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>");
  EXPECT_FALSE(p.tools_rendered);
}

TEST(RenderConversation, ContinuationOfFinalAssistant) {
  REQUIRE_TOKENIZER();
  Message a = msg(Role::kAssistant, "The answer is");
  a.prefix = true;
  RenderedPrompt p = render_ok({msg(Role::kUser, "Q"), a}, thinking(false));
  EXPECT_EQ(p.text, "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜></think>The answer is");
  EXPECT_EQ(p.start, ParseStart::kContent);
  Message r = msg(Role::kAssistant, "");
  r.reasoning = "Let me";
  r.prefix = true;
  p = render_ok({msg(Role::kUser, "Q"), r}, thinking(true));
  EXPECT_EQ(p.text, "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 + "<｜User｜>Q<｜Assistant｜><think>Let me");
  EXPECT_EQ(p.start, ParseStart::kReasoning);
  // Without prefix a final assistant message is an error when a generation prompt is wanted.
  a.prefix = false;
  auto bad = render_conversation(*testing::v41_tokenizer(), std::vector<Message>{msg(Role::kUser, "Q"), a}, thinking(false));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("messages[1]"), std::string::npos);
}

TEST(RenderConversation, Errors) {
  REQUIRE_TOKENIZER();
  const auto& tok = *testing::v41_tokenizer();
  EXPECT_EQ(render_conversation(tok, std::vector<Message>{}, thinking(false)).error().code(), StatusCode::kInvalidArgument);
  Message t = msg(Role::kTool, "R");
  auto r = render_conversation(tok, std::vector<Message>{msg(Role::kUser, "U"), t}, thinking(false));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("messages[1]"), std::string::npos) << r.error().to_string();
  RenderOptions o = thinking(true);
  o.reasoning_effort = 101;
  EXPECT_EQ(render_conversation(tok, std::vector<Message>{msg(Role::kUser, "U")}, o).error().code(), StatusCode::kInvalidArgument);
  RenderOptions bad_tool = thinking(false);
  bad_tool.tools = {Json::parse(R"({"name":"has space"})")};
  EXPECT_EQ(render_conversation(tok, std::vector<Message>{msg(Role::kUser, "U")}, bad_tool).error().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::chat
