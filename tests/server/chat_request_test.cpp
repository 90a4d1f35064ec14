// server/chat_request.h: OpenAI request JSON -> checked ChatRequest (chat-and-api.md §2, §3, §6.1),
// the error of each documented bad request (status, type, param, code), and the decisions of §2-3.
#include "server/chat_request.h"

#include <gtest/gtest.h>

#include "server/completion_request.h"

namespace strata::server {
namespace {

ServerOptions opts() { return ServerOptions{}; }

ChatRequest ok(const std::string& body, const ServerOptions& o = opts()) {
  ChatRequest r;
  const ApiError e = parse_chat_request(body, o, &r);
  EXPECT_TRUE(e.ok()) << e.to_json() << "\nbody: " << body;
  return r;
}

ApiError err(const std::string& body, const ServerOptions& o = opts()) {
  ChatRequest r;
  const ApiError e = parse_chat_request(body, o, &r);
  EXPECT_FALSE(e.ok()) << "accepted: " << body;
  return e;
}

// A body with the given extra fields after model + one user message.
std::string body(const std::string& extra = "", const std::string& messages = R"([{"role":"user","content":"Hi"}])") {
  return R"({"model":"deepseek-v4.1-flash","messages":)" + messages + (extra.empty() ? "" : "," + extra) + "}";
}

TEST(ChatRequest, Defaults) {
  const ChatRequest r = ok(body());
  EXPECT_TRUE(r.render.thinking);  // §3 rule 5: server default on
  EXPECT_EQ(r.render.reasoning_effort, 75);
  EXPECT_TRUE(r.render.drop_thinking);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.max_tokens, 0);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 1.0);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 0.95);
  EXPECT_FALSE(r.sampling.has_seed);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].content, "Hi");
}

TEST(ChatRequest, ThinkingRules) {
  // Rule 1: top-level thinking, bool or {type}.
  EXPECT_FALSE(ok(body(R"("thinking":{"type":"disabled"})")).render.thinking);
  EXPECT_FALSE(ok(body(R"("thinking":false)")).render.thinking);
  // Rule 2: kwargs; both keys present and different -> 400.
  EXPECT_FALSE(ok(body(R"("chat_template_kwargs":{"enable_thinking":false})")).render.thinking);
  EXPECT_FALSE(ok(body(R"("chat_template_kwargs":{"thinking":false})")).render.thinking);
  EXPECT_EQ(err(body(R"("chat_template_kwargs":{"thinking":true,"enable_thinking":false})")).status, 400);
  // Rule 3: reasoning_effort "none" -> off; an explicit thinking flag beats it (deepseek-recipe).
  EXPECT_FALSE(ok(body(R"("reasoning_effort":"none")")).render.thinking);
  EXPECT_FALSE(ok(body(R"("chat_template_kwargs":{"reasoning_effort":"none"})")).render.thinking);
  EXPECT_TRUE(ok(body(R"("reasoning_effort":"none","thinking":{"type":"enabled"})")).render.thinking);
  // Rule 4: model aliases.
  EXPECT_FALSE(ok(R"({"model":"deepseek-chat","messages":[{"role":"user","content":"x"}]})").render.thinking);
  EXPECT_TRUE(ok(R"({"model":"deepseek-reasoner","messages":[{"role":"user","content":"x"}]})").render.thinking);
  EXPECT_TRUE(ok(R"({"model":"deepseek-chat","thinking":true,"messages":[{"role":"user","content":"x"}]})").render.thinking);
  ServerOptions off = opts();
  off.default_thinking = false;
  EXPECT_FALSE(ok(body(), off).render.thinking);
}

// DECISION (§3): official + DeepSeek API effort table; vLLM's behind a flag.
TEST(ChatRequest, EffortTables) {
  const std::pair<const char*, int> official[] = {{"\"minimal\"", 50}, {"\"low\"", 50}, {"\"medium\"", 75},
                                                  {"\"high\"", 75},    {"\"xhigh\"", 75}, {"\"max\"", 100},
                                                  {"\"ultra\"", 100},  {"30", 30},       {"\"42\"", 42},
                                                  {"1", 1},            {"100", 100}};
  for (const auto& [v, n] : official)
    EXPECT_EQ(ok(body(std::string(R"("reasoning_effort":)") + v)).render.reasoning_effort, n) << v;
  for (const char* v : {"0", "101", "1.5", "true", "\"extreme\"", "\"\"", "-3", "\"0\""}) {
    const ApiError e = err(body(std::string(R"("reasoning_effort":)") + v));
    EXPECT_EQ(e.status, 400) << v;
    EXPECT_EQ(e.param, "reasoning_effort") << v;
  }
  // Top level overrides kwargs.
  EXPECT_EQ(ok(body(R"("reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":"max"})")).render.reasoning_effort, 50);
  EXPECT_EQ(ok(body(R"("chat_template_kwargs":{"reasoning_effort":"max"})")).render.reasoning_effort, 100);
  ServerOptions v = opts();
  v.effort_table = EffortTable::kVllm;
  EXPECT_EQ(ok(body(), v).render.reasoning_effort, 50);
  EXPECT_EQ(ok(body(R"("reasoning_effort":"low")"), v).render.reasoning_effort, 25);
  EXPECT_EQ(ok(body(R"("reasoning_effort":"high")"), v).render.reasoning_effort, 50);
  EXPECT_EQ(ok(body(R"("reasoning_effort":"xhigh")"), v).render.reasoning_effort, 75);
  for (const char* bad : {"\"minimal\"", "\"medium\"", "\"ultra\""})
    EXPECT_EQ(err(body(std::string(R"("reasoning_effort":)") + bad), v).param, "reasoning_effort");
  ServerOptions d = opts();
  d.default_effort = 60;
  EXPECT_EQ(ok(body(), d).render.reasoning_effort, 60);
}

// DECISION (§2.1): developer is rendered as system.
TEST(ChatRequest, RolesAndContent) {
  const ChatRequest r = ok(body("", R"([{"role":"developer","content":"D"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_text","text":"b"}]},{"role":"assistant","content":null,"reasoning":"r"},{"role":"user","content":null}])"));
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, chat::Role::kSystem);
  EXPECT_EQ(r.messages[1].content, "a\n\nb");
  EXPECT_EQ(r.messages[2].reasoning, "r");  // reasoning is an alias of reasoning_content
  EXPECT_EQ(r.messages[3].content, "");
  ApiError e = err(body("", R"([{"role":"wizard","content":"x"}])"));
  EXPECT_EQ(e.param, "messages[0].role");
  e = err(body("", R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages[0].content[0].type");
  EXPECT_NE(e.message.find("unsupported content type"), std::string::npos);
  e = err(body("", R"([{"role":"user","content":5}])"));
  EXPECT_EQ(e.param, "messages[0].content");
  e = err(body("", R"([{"role":"user","content":[{"type":"text"}]}])"));  // a text part needs its text
  EXPECT_EQ(e.param, "messages[0].content[0].text");
  EXPECT_EQ(err(body("", "[]")).param, "messages");
  EXPECT_EQ(err(R"({"model":"deepseek-v4.1-flash"})").param, "messages");
}

TEST(ChatRequest, LastMessageRules) {
  // A final assistant message only as a continuation.
  ApiError e = err(body("", R"([{"role":"user","content":"q"},{"role":"assistant","content":"a"}])"));
  EXPECT_EQ(e.param, "messages[1]");
  ChatRequest r = ok(body("", R"([{"role":"user","content":"q"},{"role":"assistant","content":"a","prefix":true}])"));
  EXPECT_TRUE(r.messages.back().prefix);
  r = ok(body(R"("continue_final_message":true)", R"([{"role":"user","content":"q"},{"role":"assistant","content":"a"}])"));
  EXPECT_TRUE(r.messages.back().prefix);
  // A tool message without earlier tool calls.
  e = err(body("", R"([{"role":"user","content":"q"},{"role":"tool","tool_call_id":"x","content":"r"}])"));
  EXPECT_EQ(e.param, "messages[1]");
  // Tool / system / developer last are fine.
  ok(body("", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}])"));
  ok(body("", R"([{"role":"system","content":"s"}])"));
}

TEST(ChatRequest, ToolsAndToolChoice) {
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  ChatRequest r = ok(body(tools));
  ASSERT_EQ(r.render.tools.size(), 1u);
  EXPECT_EQ(r.render.tools[0]["name"], "get_weather");
  r = ok(body(tools + R"(,"tool_choice":"none")"));
  EXPECT_EQ(r.render.tool_choice, chat::ToolChoice::kNone);
  // A forced call turns thinking off unless thinking was asked for explicitly (then 400).
  r = ok(body(tools + R"(,"tool_choice":"required")"));
  EXPECT_EQ(r.render.tool_choice, chat::ToolChoice::kRequired);
  EXPECT_FALSE(r.render.thinking);
  r = ok(body(tools + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_EQ(r.render.tool_choice_name, "get_weather");
  EXPECT_EQ(err(body(tools + R"(,"tool_choice":"required","thinking":{"type":"enabled"})")).param, "tool_choice");
  EXPECT_EQ(err(body(tools + R"(,"tool_choice":{"type":"function","function":{"name":"other"}})")).param, "tool_choice");
  EXPECT_EQ(err(body(R"("tool_choice":"required")")).param, "tool_choice");
  EXPECT_EQ(err(body(R"("tools":[{"type":"retrieval"}])")).param, "tools[0].type");
  EXPECT_EQ(err(body(R"("tools":[{"type":"function","function":{"name":"bad name"}}])")).param, "tools[0].function.name");
  EXPECT_EQ(err(body(R"("tools":[{"type":"function","function":{"name":"a\"b"}}])")).param, "tools[0].function.name");
  // Historical arguments: double-encoded and non-JSON strings are tolerated (§2.7).
  r = ok(body("", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"\"{\\\"a\\\": 1}\""}},{"id":"d","type":"function","function":{"name":"g","arguments":"oops"}}]},{"role":"tool","tool_call_id":"c","content":"r"}])"));
  EXPECT_EQ(chat::json_dumps(r.messages[1].tool_calls[0].arguments), R"({"a": 1})");
  EXPECT_EQ(chat::json_dumps(r.messages[1].tool_calls[1].arguments), R"({"arguments": "oops"})");
  // Historical call names go into the markup unescaped: a name that could end the tag is rejected,
  // but any name the output parser can return (even a hallucinated one with a space) is accepted.
  auto history = [](const std::string& name) {
    return R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":)" +
           name + R"(,"arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}])";
  };
  for (const char* bad : {R"("a\">x")", R"("a<b")", R"("a\nb")", R"("")"})
    EXPECT_EQ(err(body("", history(bad))).param, "messages[1].tool_calls[0].function.name") << bad;
  EXPECT_EQ(ok(body("", history(R"("get weather")"))).messages[1].tool_calls[0].name, "get weather");
}

TEST(ChatRequest, FieldsAndRanges) {
  ChatRequest r = ok(body(R"("stream":true,"stream_options":{"include_usage":true},"max_tokens":10,"max_completion_tokens":20,"temperature":0,"top_p":1,"top_k":5,"min_p":0.1,"seed":-7,"stop":["a","b"],"presence_penalty":-2,"frequency_penalty":2,"parallel_tool_calls":false,"response_format":{"type":"json_object"},"chat_template_kwargs":{"drop_thinking":false,"other":1},"user":"u","metadata":{},"store":false,"service_tier":"auto","logit_bias":{},"prediction":null,"n":1,"logprobs":false,"some_future_field":{"x":1})"));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 20);  // max_completion_tokens wins
  EXPECT_EQ(r.sampling.temperature, 0);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_TRUE(r.sampling.has_seed);
  EXPECT_EQ(r.sampling.seed, -7);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_TRUE(r.render.response_format.is_object());
  EXPECT_FALSE(r.render.drop_thinking);
  EXPECT_EQ(ok(body(R"("stop":"x")")).stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(ok(body(R"("response_format":{"type":"text"})")).render.response_format.is_object());

  const std::pair<const char*, const char*> bad[] = {
      {R"("temperature":2.5)", "temperature"},   {R"("temperature":"hot")", "temperature"},
      {R"("top_p":0)", "top_p"},                 {R"("top_p":1.5)", "top_p"},
      {R"("max_tokens":0)", "max_tokens"},       {R"("max_completion_tokens":1.5)", "max_completion_tokens"},
      {R"("stream":"yes")", "stream"},           {R"("stop":[""])", "stop[0]"},
      {R"("stop":[1])", "stop[0]"},              {R"("presence_penalty":3)", "presence_penalty"},
      {R"("response_format":{"type":"xml"})", "response_format.type"},
      {R"("n":2)", "n"},                         {R"("logprobs":1)", "logprobs"},
      {R"("top_logprobs":2)", "top_logprobs"},   {R"("modalities":["text","audio"])", "modalities"},
      {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"("logprobs":true,"top_logprobs":-1)", "top_logprobs"},
      {R"("seed":"x")", "seed"},                 {R"("thinking":"maybe")", "thinking"},
      {R"("chat_template_kwargs":[])", "chat_template_kwargs"}};
  for (const auto& [field, param] : bad) {
    const ApiError e = err(body(field));
    EXPECT_EQ(e.status, 400) << field;
    EXPECT_EQ(e.type, "invalid_request_error") << field;
    EXPECT_EQ(e.param, param) << field;
  }
  std::string many = R"("stop":[)";
  for (int i = 0; i < 17; ++i) many += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  EXPECT_EQ(err(body(many + "]")).param, "stop");
  // Stop strings are bounded (the parser rescans a held-back suffix on the model thread).
  const std::string longest(kMaxStopBytes, 'x');
  EXPECT_EQ(ok(body(R"("stop":")" + longest + "\"")).stop[0].size(), kMaxStopBytes);
  EXPECT_EQ(err(body(R"("stop":")" + longest + "y\"")).param, "stop");
  EXPECT_EQ(err(body(R"("stop":["a",")" + longest + "y\"]")).param, "stop[1]");
  EXPECT_EQ(err(body(R"("n":2)")).code, "unsupported_parameter");
}

TEST(ChatRequest, Logprobs) {
  EXPECT_EQ(ok(body()).logprobs, -1);
  EXPECT_EQ(ok(body(R"("logprobs":false)")).logprobs, -1);
  EXPECT_EQ(ok(body(R"("logprobs":true)")).logprobs, 0);
  EXPECT_EQ(ok(body(R"("logprobs":true,"top_logprobs":20)")).logprobs, 20);
  EXPECT_NE(err(body(R"("top_logprobs":3)")).message.find("logprobs"), std::string::npos);
  // Completions: the legacy integer.
  auto completion = [](const std::string& logprobs, CompletionRequest* c) {
    return parse_completion_request(R"({"model":"deepseek-v4.1-flash","prompt":"x","logprobs":)" + logprobs + "}", opts(),
                                    c);
  };
  CompletionRequest c;
  EXPECT_TRUE(completion("5", &c).ok());
  EXPECT_EQ(c.logprobs, 5);
  EXPECT_EQ(completion("true", &c).param, "logprobs");
  EXPECT_EQ(completion("21", &c).param, "logprobs");
}

TEST(ChatRequest, ModelAndJson) {
  ApiError e = err(R"({"model":"gpt-4o","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  ServerOptions any = opts();
  any.any_model = true;
  ok(R"({"model":"gpt-4o","messages":[{"role":"user","content":"x"}]})", any);
  ok(R"({"model":"deepseek-flash","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(err("{not json").code, "invalid_json");
  EXPECT_EQ(err("[1,2]").code, "invalid_json");
  EXPECT_EQ(err("\"\xff\"").code, "invalid_json");
  EXPECT_EQ(err(std::string(200, '[') + std::string(200, ']')).code, "invalid_json");  // nesting bound
  EXPECT_EQ(err(R"({"messages":[]})").param, "model");
  EXPECT_EQ(
      ApiError(err(R"({"model":"x","messages":[]})")).to_json(),
      R"x({"error":{"message":"The model 'x' does not exist (served: see GET /v1/models)","type":"invalid_request_error","param":"model","code":"model_not_found"}})x");
}

// TEST ONLY field: never read without the option.
TEST(ChatRequest, ScriptedOutputNeedsTheOption) {
  EXPECT_FALSE(ok(body(R"("strata_test_output":"x")")).has_test_output);
  ServerOptions t = opts();
  t.test_scripted_output = true;
  const ChatRequest r = ok(body(R"("strata_test_output":"x")"), t);
  EXPECT_TRUE(r.has_test_output);
  EXPECT_EQ(r.test_output, "x");
}

TEST(CompletionRequest, Shapes) {
  CompletionRequest r;
  ASSERT_TRUE(parse_completion_request(R"({"model":"deepseek-v4.1-flash","prompt":"Once"})", opts(), &r).ok());
  EXPECT_EQ(r.prompt_text, "Once");
  EXPECT_EQ(r.max_tokens, 16);
  ASSERT_TRUE(parse_completion_request(R"({"model":"deepseek-v4.1-flash","prompt":[0,5,7],"max_tokens":3})", opts(), &r).ok());
  EXPECT_TRUE(r.has_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{0, 5, 7}));
  EXPECT_TRUE(r.max_tokens_explicit);
  EXPECT_EQ(parse_completion_request(R"({"model":"deepseek-v4.1-flash","prompt":["a","b"]})", opts(), &r).param, "prompt");
  EXPECT_EQ(parse_completion_request(R"({"model":"deepseek-v4.1-flash","prompt":"a","echo":true})", opts(), &r).param, "echo");
  EXPECT_EQ(parse_completion_request(R"({"model":"deepseek-v4.1-flash"})", opts(), &r).param, "prompt");
  EXPECT_EQ(parse_completion_request(R"({"model":"m","prompt":"a"})", opts(), &r).status, 404);
}

}  // namespace
}  // namespace strata::server
