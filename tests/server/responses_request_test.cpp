// server/responses_request.h and server/response_store.h: OpenAI Responses JSON -> the chat path's
// ChatRequest (input items, instructions, reasoning, function calls and outputs, tools, tool_choice,
// text.format), the conversation assembled after a stored one, every bad request naming its field;
// and the store's bounds.
#include "server/responses_request.h"

#include <gtest/gtest.h>

#include "chat/render.h"
#include "server/response_store.h"
#include "tests/chat/v41_tokenizer.h"

namespace strata::server {
namespace {

using chat::Role;

ResponsesRequest ok(const std::string& body, const std::vector<chat::Message>& history = {}) {
  ResponsesRequest r;
  ApiError e = parse_responses_request(body, ServerOptions{}, &r);
  EXPECT_TRUE(e.ok()) << e.to_json() << "\nbody: " << body;
  e = assemble_responses_conversation(history, &r);
  EXPECT_TRUE(e.ok()) << e.to_json() << "\nbody: " << body;
  return r;
}

ApiError err(const std::string& body, const std::vector<chat::Message>& history = {}) {
  ResponsesRequest r;
  ApiError e = parse_responses_request(body, ServerOptions{}, &r);
  if (e.ok()) e = assemble_responses_conversation(history, &r);
  EXPECT_FALSE(e.ok()) << "accepted: " << body;
  return e;
}

std::string body(const std::string& extra, const std::string& input = R"("Hi")") {
  return R"({"model":"deepseek-v4.1-flash","input":)" + input + (extra.empty() ? "" : "," + extra) + "}";
}

const std::string kTools =
    R"("tools":[{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"location":{"type":"string"}}}}])";

TEST(ResponsesRequest, StringInputAndInstructions) {
  const ResponsesRequest r = ok(body(R"("instructions":"Be brief.","max_output_tokens":50,"temperature":0)"));
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[0].role, Role::kSystem);
  EXPECT_EQ(r.chat.messages[0].content, "Be brief.");
  EXPECT_EQ(r.chat.messages[1].role, Role::kUser);
  EXPECT_EQ(r.chat.messages[1].content, "Hi");
  EXPECT_EQ(r.input.size(), 1u) << "instructions are not part of what is stored";
  EXPECT_EQ(r.chat.max_tokens, 50);
  EXPECT_DOUBLE_EQ(r.chat.sampling.temperature, 0);
  EXPECT_TRUE(r.chat.render.thinking) << "absent reasoning: the chat path's default (on)";
  EXPECT_TRUE(r.store);
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
}

TEST(ResponsesRequest, ItemsFormAssistantTurns) {
  const std::string input = R"([
    {"role":"user","content":[{"type":"input_text","text":"Weather in Paris?"}]},
    {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Need data."}]},
    {"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"location\":\"Paris\"}"},
    {"type":"function_call_output","call_id":"call_1","output":"18 C"},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"It is 18 C."}]},
    {"role":"developer","content":"Answer in French."},
    {"role":"user","content":"And tomorrow?"}])";
  const ResponsesRequest r = ok(body(kTools, input));
  const auto& m = r.chat.messages;
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[1].role, Role::kAssistant);
  EXPECT_EQ(m[1].reasoning, "Need data.");
  ASSERT_EQ(m[1].tool_calls.size(), 1u);
  EXPECT_EQ(m[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(m[1].tool_calls[0].arguments.dump(), R"({"location":"Paris"})");
  EXPECT_EQ(m[2].role, Role::kTool);
  EXPECT_EQ(m[2].tool_call_id, "call_1");
  EXPECT_EQ(m[2].content, "18 C");
  EXPECT_EQ(m[3].role, Role::kAssistant);
  EXPECT_EQ(m[3].content, "It is 18 C.");
  EXPECT_EQ(m[4].role, Role::kSystem);
  EXPECT_EQ(m[5].content, "And tomorrow?");
  ASSERT_EQ(r.chat.render.tools.size(), 1u);
  EXPECT_EQ(r.chat.render.tools[0]["parameters"]["type"], "object");
}

TEST(ResponsesRequest, ReasoningToolChoiceAndFormat) {
  EXPECT_FALSE(ok(body(R"("reasoning":{"effort":"none"})")).chat.render.thinking);
  const ResponsesRequest hi = ok(body(R"("reasoning":{"effort":"max","summary":"auto"})"));
  EXPECT_TRUE(hi.chat.render.thinking);
  EXPECT_EQ(hi.chat.render.reasoning_effort, 100);
  EXPECT_FALSE(ok(R"({"model":"deepseek-chat","input":"x"})").chat.render.thinking);
  EXPECT_EQ(err(body(R"("reasoning":{"effort":"extreme"})")).param, "reasoning.effort");
  EXPECT_EQ(ok(body(kTools + R"(,"tool_choice":"required")")).chat.render.tool_choice, chat::ToolChoice::kRequired);
  const ResponsesRequest named = ok(body(kTools + R"(,"tool_choice":{"type":"function","name":"get_weather"})"));
  EXPECT_EQ(named.chat.render.tool_choice, chat::ToolChoice::kNamed);
  EXPECT_FALSE(named.chat.render.thinking) << "a forced call renders with thinking off";
  EXPECT_EQ(err(body(kTools + R"(,"tool_choice":{"type":"function","name":"nope"})")).param, "tool_choice.name");
  EXPECT_EQ(err(body(R"("tool_choice":"required")")).param, "tool_choice");
  const ResponsesRequest js =
      ok(body(R"("text":{"format":{"type":"json_schema","name":"w","schema":{"type":"object"},"strict":true}})"));
  EXPECT_EQ(js.chat.render.response_format["json_schema"]["name"], "w");
  EXPECT_EQ(js.chat.render.response_format["json_schema"]["schema"]["type"], "object");
  EXPECT_EQ(err(body(R"("text":{"format":{"type":"xml"}})")).param, "text.format.type");
}

TEST(ResponsesRequest, PreviousConversationGoesBetweenInstructionsAndInput) {
  chat::Message u, a;
  u.role = Role::kUser;
  u.content = "Weather?";
  a.role = Role::kAssistant;
  a.tool_calls.push_back(chat::ToolCall{"call_9", "get_weather", chat::Json::object()});
  const ResponsesRequest r = ok(
      body(R"("instructions":"S")", R"([{"type":"function_call_output","call_id":"call_9","output":"18 C"}])"), {u, a});
  ASSERT_EQ(r.chat.messages.size(), 4u);
  EXPECT_EQ(r.chat.messages[0].content, "S");
  EXPECT_EQ(r.chat.messages[1].content, "Weather?");
  EXPECT_EQ(r.chat.messages[3].role, Role::kTool);
  // Without the stored call the output answers nothing.
  EXPECT_EQ(err(body("", R"([{"type":"function_call_output","call_id":"call_9","output":"18 C"}])")).param,
            "input[0].call_id");
}

TEST(ResponsesRequest, BadRequestsNameTheField) {
  EXPECT_EQ(err(R"({"model":"deepseek-v4.1-flash"})").param, "input");
  EXPECT_EQ(err(R"({"input":"x"})").param, "model");
  EXPECT_EQ(err(R"({"model":"gpt-x","input":"x"})").status, 404);
  EXPECT_EQ(err(body("", "[]")).param, "input");
  EXPECT_EQ(err(body("", "5")).param, "input");
  EXPECT_EQ(err(body("", R"([{"role":"robot","content":"x"}])")).param, "input[0].role");
  EXPECT_EQ(err(body("", R"([{"role":"user","content":[{"type":"input_image","image_url":"x"}]}])")).param,
            "input[0].content[0].type");
  EXPECT_EQ(err(body("", R"([{"type":"item_reference","id":"x"}])")).param, "input[0].type");
  EXPECT_EQ(err(body("", R"([{"type":"function_call","name":"f","arguments":"{}"}])")).param, "input[0].call_id");
  EXPECT_EQ(err(body("", R"([{"type":"function_call","call_id":"c","name":"f<x","arguments":"{}"}])")).param,
            "input[0].name");
  EXPECT_EQ(err(body("", R"([{"role":"user","content":"x"},{"role":"assistant","content":"y"}])")).param, "input");
  EXPECT_EQ(err(body(R"("tools":[{"type":"web_search"}])")).param, "tools[0].type");
  EXPECT_EQ(err(body(R"("tools":[{"type":"function","name":"a b"}])")).param, "tools[0].name");
  EXPECT_EQ(err(body(R"("max_output_tokens":0)")).param, "max_output_tokens");
  EXPECT_EQ(err(body(R"("background":true)")).param, "background");
  EXPECT_EQ(err(body(R"("temperature":5)")).param, "temperature");
  EXPECT_EQ(err("[1]").code, "invalid_json");
  EXPECT_EQ(err(body(R"("previous_response_id":"")")).param, "previous_response_id");
}

// Fields strata does not serve are refused by name, never ignored; the harmless ones pass.
TEST(ResponsesRequest, UnsupportedAndUnknownFieldsAreRefused) {
  for (const char* k : {"conversation", "prompt", "top_logprobs", "max_tool_calls"}) {
    const ApiError e = err(body("\"" + std::string(k) + "\":" + (std::string(k) == "prompt" ? "{\"id\":\"p\"}" : "3")));
    EXPECT_EQ(e.status, 400) << k;
    EXPECT_EQ(e.param, k);
    EXPECT_EQ(e.code, "unsupported_parameter") << k;
    EXPECT_NE(e.message.find(k), std::string::npos) << e.message;
  }
  const ApiError e = err(body(R"("temprature":0.5)"));
  EXPECT_EQ(e.param, "temprature");
  EXPECT_EQ(e.code, "unknown_parameter");
  EXPECT_EQ(err(body(R"("truncation":"auto")")).param, "truncation");
  EXPECT_EQ(err(body(R"("strata_test_output":"x")")).param, "strata_test_output") << "only with --test-scripted-output";
  ok(body(R"("metadata":{"a":"b"},"user":"u","safety_identifier":"s","prompt_cache_key":"k","service_tier":"auto",)"
          R"("include":["reasoning.encrypted_content"],"truncation":"disabled","top_k":5,"seed":1)"));
}

TEST(ResponsesRequest, RendersLikeTheEquivalentChatRequest) {
  const tokenizer::Tokenizer* tok = testing::v41_tokenizer();
  if (!tok) GTEST_SKIP() << "fixture tokenizer missing: " << testing::v3_tokenizer_path();
  const ResponsesRequest r = ok(body(kTools + R"(,"instructions":"S")", R"([{"role":"user","content":"Q"},
      {"type":"function_call","call_id":"t1","name":"get_weather","arguments":"{\"location\":\"Paris\"}"},
      {"type":"function_call_output","call_id":"t1","output":"18 C"}])"));
  ChatRequest c;
  const ApiError e = parse_chat_request(R"({"model":"deepseek-v4.1-flash","messages":[
      {"role":"system","content":"S"},{"role":"user","content":"Q"},
      {"role":"assistant","content":"","tool_calls":[{"id":"t1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"t1","content":"18 C"}],
      "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"location":{"type":"string"}}}}}]})",
                                        ServerOptions{}, &c);
  ASSERT_TRUE(e.ok()) << e.to_json();
  auto a = chat::render_conversation(*tok, r.chat.messages, r.chat.render);
  auto b = chat::render_conversation(*tok, c.messages, c.render);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ids, b->ids);
}

TEST(ResponseStore, BoundedLeastRecentlyUsed) {
  auto conv = [](const std::string& text) {
    chat::Message m;
    m.content = text;
    return std::vector<chat::Message>{m};
  };
  ResponseStore s(2, 1 << 20);
  s.put("a", conv("1"));
  s.put("b", conv("2"));
  ASSERT_TRUE(s.get("a").has_value());  // a is now the most recent
  s.put("c", conv("3"));
  EXPECT_FALSE(s.get("b").has_value()) << "the least recently used went first";
  EXPECT_EQ(s.get("a")->at(0).content, "1");
  EXPECT_EQ(s.get("c")->at(0).content, "3");
  EXPECT_EQ(s.size(), 2u);
  // The byte bound: one large conversation pushes the others out, a larger one than the bound is dropped too.
  ResponseStore small(100, 1000);
  small.put("x", conv(std::string(500, 'x')));
  small.put("y", conv(std::string(600, 'y')));
  EXPECT_FALSE(small.get("x").has_value());
  EXPECT_TRUE(small.get("y").has_value());
  small.put("z", conv(std::string(5000, 'z')));
  EXPECT_EQ(small.size(), 0u);
}

TEST(ResponseStore, KeepsTheResponseObjectAndErases) {
  ResponseStore s(4, 1 << 20);
  s.put("resp_a", {}, R"({"id":"resp_a"})");
  EXPECT_EQ(s.get_response("resp_a"), std::optional<std::string>(R"({"id":"resp_a"})"));
  EXPECT_FALSE(s.get_response("resp_b").has_value());
  EXPECT_TRUE(s.erase("resp_a"));
  EXPECT_FALSE(s.erase("resp_a"));
  EXPECT_FALSE(s.get("resp_a").has_value());
  EXPECT_EQ(s.size(), 0u);
  // Its text counts against the byte bound.
  ResponseStore small(10, 1000);
  small.put("x", {}, std::string(2000, 'x'));
  EXPECT_EQ(small.size(), 0u);
}

}  // namespace
}  // namespace strata::server
