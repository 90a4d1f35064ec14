// server/messages_request.h: Anthropic Messages JSON -> the chat path's ChatRequest. Each block type
// lands where the chat renderer expects it (system, user text, tool results as tool messages,
// assistant thinking / text / tool_use), thinking and tool_choice map to the render options, and
// every bad request names its field.
#include "server/messages_request.h"

#include <gtest/gtest.h>

#include "chat/render.h"
#include "tests/chat/v41_tokenizer.h"

namespace strata::server {
namespace {

using chat::Role;

ChatRequest ok(const std::string& body, MessagesRoute route = MessagesRoute::kCreate, const ServerOptions& o = {}) {
  ChatRequest r;
  const ApiError e = parse_messages_request(body, o, route, &r);
  EXPECT_TRUE(e.ok()) << e.to_anthropic_json() << "\nbody: " << body;
  return r;
}

ApiError err(const std::string& body, MessagesRoute route = MessagesRoute::kCreate) {
  ChatRequest r;
  const ApiError e = parse_messages_request(body, ServerOptions{}, route, &r);
  EXPECT_FALSE(e.ok()) << "accepted: " << body;
  return e;
}

// A body with max_tokens, the given messages and extra fields.
std::string body(const std::string& extra = "", const std::string& messages = R"([{"role":"user","content":"Hi"}])") {
  return R"({"model":"deepseek-v4.1-flash","max_tokens":64,"messages":)" + messages +
         (extra.empty() ? "" : "," + extra) + "}";
}

const std::string kTools =
    R"("tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"location":{"type":"string"}}}}])";

TEST(MessagesRequest, Defaults) {
  const ChatRequest r = ok(body());
  EXPECT_EQ(r.max_tokens, 64);
  EXPECT_FALSE(r.render.thinking);  // DECISION: absent thinking is off, as in Anthropic's API
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.parallel_tool_calls);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, Role::kUser);
  EXPECT_EQ(r.messages[0].content, "Hi");
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 1.0);
}

TEST(MessagesRequest, SystemStringOrBlocks) {
  ChatRequest r = ok(body(R"("system":"Be brief.")"));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, Role::kSystem);
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  r = ok(
      body(R"("system":[{"type":"text","text":"A"},{"type":"text","text":"B","cache_control":{"type":"ephemeral"}}])"));
  EXPECT_EQ(r.messages[0].content, "A\n\nB");
  EXPECT_EQ(err(body(R"("system":[{"type":"image"}])")).param, "system[0].type");
  EXPECT_EQ(err(body(R"("system":5)")).param, "system");
}

TEST(MessagesRequest, MultiTurnWithThinkingAndToolRoundTrip) {
  const std::string msgs = R"([
    {"role":"user","content":[{"type":"text","text":"Weather in Paris?"}]},
    {"role":"assistant","content":[{"type":"thinking","thinking":"Need data.","signature":"sig"},
      {"type":"text","text":"Checking."},
      {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"location":"Paris"}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"18 C"},
      {"type":"text","text":"And tomorrow?"}]}])";
  const ChatRequest r = ok(body(kTools + R"(,"thinking":{"type":"enabled","budget_tokens":2048})", msgs));
  EXPECT_TRUE(r.render.thinking);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].role, Role::kAssistant);
  EXPECT_EQ(r.messages[1].reasoning, "Need data.");
  EXPECT_EQ(r.messages[1].content, "Checking.");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "toolu_1");
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments.dump(), R"({"location":"Paris"})");
  EXPECT_FALSE(r.messages[1].prefix);
  EXPECT_EQ(r.messages[2].role, Role::kTool);
  EXPECT_EQ(r.messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(r.messages[2].content, "18 C");
  EXPECT_EQ(r.messages[3].role, Role::kUser);
  EXPECT_EQ(r.messages[3].content, "And tomorrow?");
  // Tools become the renderer's function objects.
  ASSERT_EQ(r.render.tools.size(), 1u);
  EXPECT_EQ(r.render.tools[0]["name"], "get_weather");
  EXPECT_EQ(r.render.tools[0]["description"], "Weather");
  EXPECT_EQ(r.render.tools[0]["parameters"]["type"], "object");
}

TEST(MessagesRequest, ToolResultForms) {
  const std::string call =
      R"({"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]})";
  auto with_result = [&](const std::string& result) {
    return body(kTools,
                R"([{"role":"user","content":"x"},)" + call + R"(,{"role":"user","content":[)" + result + "]}]");
  };
  EXPECT_EQ(
      ok(with_result(
             R"({"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]})"))
          .messages[2]
          .content,
      "a\n\nb");
  EXPECT_EQ(ok(with_result(R"({"type":"tool_result","tool_use_id":"t1"})")).messages[2].content, "");
  EXPECT_EQ(ok(with_result(R"({"type":"tool_result","tool_use_id":"t1","content":"boom","is_error":true})"))
                .messages[2]
                .content,
            "Error: boom");
  EXPECT_EQ(err(with_result(R"({"type":"tool_result","tool_use_id":"t9","content":"x"})")).param,
            "messages[2].content[0].tool_use_id");
  EXPECT_EQ(err(with_result(R"({"type":"tool_result","content":"x"})")).param, "messages[2].content[0].tool_use_id");
  EXPECT_EQ(err(with_result(R"({"type":"tool_result","tool_use_id":"t1","content":[{"type":"image"}]})")).param,
            "messages[2].content[0].content[0].type");
}

TEST(MessagesRequest, FinalAssistantMessageIsAContinuation) {
  const ChatRequest r = ok(body("", R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}])"));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_TRUE(r.messages[1].prefix);
  EXPECT_EQ(r.messages[1].content, "Hello");
  EXPECT_EQ(
      err(body(
              kTools,
              R"([{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"get_weather","input":{}}]}])"))
          .param,
      "messages[1]");
}

TEST(MessagesRequest, ThinkingAndToolChoice) {
  EXPECT_TRUE(ok(body(R"("thinking":{"type":"enabled","budget_tokens":1024})")).render.thinking);
  EXPECT_TRUE(ok(body(R"("thinking":{"type":"adaptive"})")).render.thinking);
  EXPECT_FALSE(ok(body(R"("thinking":{"type":"disabled"})")).render.thinking);
  EXPECT_TRUE(
      ok(R"({"model":"deepseek-reasoner","max_tokens":8,"messages":[{"role":"user","content":"x"}]})").render.thinking);
  EXPECT_EQ(err(body(R"("thinking":{"type":"sometimes"})")).param, "thinking.type");
  EXPECT_EQ(err(body(R"("thinking":{"type":"enabled","budget_tokens":0})")).param, "thinking.budget_tokens");
  EXPECT_EQ(err(body(R"("thinking":true)")).param, "thinking");
  EXPECT_EQ(ok(body(R"("output_config":{"effort":"max"})")).render.reasoning_effort, 100);

  EXPECT_EQ(ok(body(kTools + R"(,"tool_choice":{"type":"auto"})")).render.tool_choice, chat::ToolChoice::kAuto);
  EXPECT_EQ(ok(body(kTools + R"(,"tool_choice":{"type":"none"})")).render.tool_choice, chat::ToolChoice::kNone);
  const ChatRequest any = ok(body(kTools + R"(,"tool_choice":{"type":"any","disable_parallel_tool_use":true})"));
  EXPECT_EQ(any.render.tool_choice, chat::ToolChoice::kRequired);
  EXPECT_FALSE(any.parallel_tool_calls);
  EXPECT_FALSE(any.render.thinking);
  const ChatRequest named = ok(body(kTools + R"(,"tool_choice":{"type":"tool","name":"get_weather"})"));
  EXPECT_EQ(named.render.tool_choice, chat::ToolChoice::kNamed);
  EXPECT_EQ(named.render.tool_choice_name, "get_weather");
  EXPECT_EQ(err(body(kTools + R"(,"tool_choice":{"type":"tool","name":"nope"})")).param, "tool_choice.name");
  EXPECT_EQ(err(body(R"("tool_choice":{"type":"any"})")).param, "tool_choice.type");
  // A forced call with thinking explicitly on: Anthropic's rule and §4 rule 7.
  EXPECT_EQ(
      err(body(kTools + R"(,"tool_choice":{"type":"any"},"thinking":{"type":"enabled","budget_tokens":1024})")).param,
      "thinking");
}

TEST(MessagesRequest, SamplingStopAndStream) {
  const ChatRequest r =
      ok(body(R"("temperature":0,"top_p":0.5,"top_k":40,"stop_sequences":["END","##"],"stream":true)"));
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 0.5);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"END", "##"}));
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(err(body(R"("stop_sequences":[""])")).param, "stop_sequences[0]");
  EXPECT_EQ(err(body(R"("temperature":"hot")")).param, "temperature");
}

// Anthropic's own limits, narrower than the chat API's, answered 400 invalid_request_error.
TEST(MessagesRequest, AnthropicRangesAndShapes) {
  for (const auto& [extra, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("stop_sequences":"END")", "stop_sequences"},
           {R"("temperature":1.5)", "temperature"},
           {R"("top_k":-1)", "top_k"},
           {R"("tools":[{"name":"f","input_schema":{}},{"name":"f","input_schema":{}}])", "tools[1].name"}}) {
    const ApiError e = err(body(extra));
    EXPECT_EQ(e.status, 400) << extra;
    EXPECT_EQ(e.type, "invalid_request_error") << extra;
    EXPECT_EQ(e.param, param) << extra;
  }
  EXPECT_EQ(err(body("", R"([{"role":"user","content":""}])")).param, "messages[0].content");
  EXPECT_EQ(err(body("", R"([{"role":"user","content":[]}])")).param, "messages[0].content");
  EXPECT_EQ(err(body("", R"([{"role":"user","content":[{"type":"text","text":""}]}])")).param,
            "messages[0].content[0].text");
  EXPECT_EQ(
      err(body("",
               R"([{"role":"user","content":"x"},{"role":"assistant","content":""},{"role":"user","content":"y"}])"))
          .param,
      "messages[1].content");
  // The limits themselves pass, and a final assistant message (a prefill) may be empty.
  ok(body(R"("temperature":1,"top_k":0,"stop_sequences":[])"));
  ok(body("", R"([{"role":"user","content":"x"},{"role":"assistant","content":""}])"));
}

TEST(MessagesRequest, BadRequestsNameTheField) {
  EXPECT_EQ(err(R"({"model":"deepseek-v4.1-flash","messages":[{"role":"user","content":"x"}]})").param, "max_tokens");
  EXPECT_EQ(err(body(R"("max_tokens":0)")).param, "max_tokens");
  EXPECT_EQ(err(R"({"max_tokens":5,"messages":[]})").param, "model");
  EXPECT_EQ(err(R"({"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"x"}]})").status, 404);
  EXPECT_EQ(err(body("", "[]")).param, "messages");
  EXPECT_EQ(err(body("", R"([{"role":"system","content":"x"}])")).param, "messages[0].role");
  EXPECT_EQ(err(body("", R"([{"role":"user"}])")).param, "messages[0].content");
  EXPECT_EQ(err(body("", R"([{"role":"user","content":[{"type":"image","source":{}}]}])")).param,
            "messages[0].content[0].type");
  EXPECT_EQ(err(body("", R"([{"role":"user","content":[{"type":"text"}]}])")).param, "messages[0].content[0].text");
  EXPECT_EQ(err(body("", R"([{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}])")).param,
            "messages[0].content[0].type");
  EXPECT_EQ(
      err(body(
              "",
              R"([{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f<","input":{}}]},{"role":"user","content":"y"}])"))
          .param,
      "messages[1].content[0].name");
  EXPECT_EQ(
      err(body(
              "",
              R"([{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":[1]}]},{"role":"user","content":"y"}])"))
          .param,
      "messages[1].content[0].input");
  EXPECT_EQ(err(body(R"("tools":[{"name":"bad name","input_schema":{}}])")).param, "tools[0].name");
  EXPECT_EQ(err(body(R"("tools":[{"name":"f"}])")).param, "tools[0].input_schema");
  EXPECT_EQ(err(body(R"("tools":[{"type":"web_search_20250305","name":"web_search"}])")).param, "tools[0].type");
  EXPECT_EQ(err("{not json").code, "invalid_json");
}

TEST(MessagesRequest, CountTokensNeedsNoMaxTokens) {
  const ChatRequest r =
      ok(R"({"model":"deepseek-v4.1-flash","messages":[{"role":"user","content":"x"}]})", MessagesRoute::kCountTokens);
  EXPECT_EQ(r.messages.size(), 1u);
}

TEST(MessagesRequest, AnthropicErrorEnvelope) {
  const ApiError e = err(body(R"("max_tokens":"many")"));
  const Json j = Json::parse(e.to_anthropic_json());
  EXPECT_EQ(j["type"], "error");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
  EXPECT_EQ(anthropic_error_type(ApiError{401, "authentication_error", "x", "", ""}), "authentication_error");
  EXPECT_EQ(anthropic_error_type(ApiError{404, "invalid_request_error", "x", "", ""}), "not_found_error");
  EXPECT_EQ(anthropic_error_type(unavailable("busy", "overloaded")), "overloaded_error");
  EXPECT_EQ(anthropic_error_type(internal_error("bug")), "api_error");
  EXPECT_EQ(error_dialect("/v1/messages"), ErrorDialect::kAnthropic);
  EXPECT_EQ(error_dialect("/v1/messages/count_tokens"), ErrorDialect::kAnthropic);
  EXPECT_EQ(error_dialect("/v1/messagesx"), ErrorDialect::kOpenAI);
  EXPECT_EQ(error_dialect("/v1/chat/completions"), ErrorDialect::kOpenAI);
}

// The translated request renders as the same conversation sent through the chat API would.
TEST(MessagesRequest, RendersLikeTheEquivalentChatRequest) {
  const tokenizer::Tokenizer* tok = testing::v41_tokenizer();
  if (!tok) GTEST_SKIP() << "fixture tokenizer missing: " << testing::v3_tokenizer_path();
  const ChatRequest m = ok(body(kTools + R"(,"system":"S","thinking":{"type":"enabled","budget_tokens":1024})",
                                R"([{"role":"user","content":"Q"},
      {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{"location":"Paris"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"18 C"}]}])"));
  ChatRequest c;
  const ApiError e = parse_chat_request(R"({"model":"deepseek-v4.1-flash","messages":[
      {"role":"system","content":"S"},{"role":"user","content":"Q"},
      {"role":"assistant","content":"","tool_calls":[{"id":"t1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"t1","content":"18 C"}],
      "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"location":{"type":"string"}}}}}],
      "thinking":{"type":"enabled"}})",
                                        ServerOptions{}, &c);
  ASSERT_TRUE(e.ok()) << e.to_json();
  auto a = chat::render_conversation(*tok, m.messages, m.render);
  auto b = chat::render_conversation(*tok, c.messages, c.render);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ids, b->ids);
}

}  // namespace
}  // namespace strata::server
