// Structured output end to end over loopback HTTP (tiny synthesized checkpoint, random weights, so
// only the grammar makes the answers well formed): response_format json_schema answers validate
// against their schema at several seeds and temperatures (T = 1 included), json_object answers are
// JSON objects, forced tool calls (named and "required"; chat completions, Responses text.format,
// Anthropic messages) return arguments that validate, the streaming and non-streaming answers of a
// forced call agree (review finding 1), and an unsupported schema keyword is a 400 naming it; the
// break-in findings of issue 20 item 4 (the text "</think>" in answers, EOS during reasoning, many
// tools and properties, response_format with auto tools, duplicate tools, Allow, strict, 1e400).
#include <gtest/gtest.h>

#include <chrono>

#include "tests/server/api_serve_fixture.h"
#include "tests/support/schema_check.h"

namespace strata::server {
namespace {

using namespace testing_api;
using OJson = nlohmann::ordered_json;

const char* kPersonSchema = R"({"type":"object","properties":{
    "name":{"type":"string","maxLength":12},
    "age":{"type":"integer"},
    "mood":{"enum":["happy","sad",null]},
    "tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3},
    "address":{"type":"object","properties":{"city":{"type":"string","maxLength":10},"zip":{"type":["integer","null"]}},
               "required":["city","zip"],"additionalProperties":false}},
    "required":["name","age","address"],"additionalProperties":false})";

const char* kWeatherParams = R"({"type":"object","properties":{
    "location":{"type":"string","maxLength":10},
    "unit":{"type":"string","enum":["celsius","fahrenheit"]},
    "days":{"type":"integer"}},"required":["location","unit"]})";

class StructuredOutput : public ApiServe {
 protected:
  static json chat_req(json extra) {
    json b = {{"model", kModel},
              {"max_tokens", 600},
              {"thinking", {{"type", "disabled"}}},
              {"messages", {{{"role", "user"}, {"content", "Describe a person as JSON."}}}}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }
  static json weather_tools() {
    return json::array(
        {{{"type", "function"},
          {"function",
           {{"name", "get_weather"}, {"description", "Current weather"}, {"parameters", json::parse(kWeatherParams)}}}},
         {{"type", "function"},
          {"function", {{"name", "get_time"}, {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}}});
  }
  // The content parsed as JSON; fails the test when it does not parse.
  static OJson parse_content(const json& msg) {
    EXPECT_TRUE(msg["content"].is_string()) << msg;
    const OJson v = OJson::parse(msg["content"].is_string() ? msg["content"].get<std::string>() : "", nullptr, false);
    EXPECT_FALSE(v.is_discarded()) << msg["content"];
    return v;
  }
};

TEST_F(StructuredOutput, JsonSchemaAnswersValidateAcrossSeedsAndTemperatures) {
  start();
  const OJson schema = OJson::parse(kPersonSchema);
  for (const double t : {0.0, 0.7, 1.0}) {
    for (const int seed : {1, 2, 3}) {
      const json r = create(
          chat_req(
              {{"temperature", t},
               {"seed", seed},
               {"response_format",
                {{"type", "json_schema"},
                 {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", json::parse(kPersonSchema)}}}}}}),
          200, "/v1/chat/completions");
      const json& choice = r["choices"][0];
      EXPECT_EQ(choice["finish_reason"], "stop") << "T=" << t << " seed=" << seed << " " << r;
      const OJson v = parse_content(choice["message"]);
      EXPECT_EQ(test::schema_violation(v, schema), "") << "T=" << t << " seed=" << seed << " " << v.dump();
    }
  }
}

TEST_F(StructuredOutput, JsonSchemaStreamsTheSameAnswer) {
  start();
  const json body =
      chat_req({{"temperature", 1.0},
                {"seed", 11},
                {"response_format",
                 {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", json::parse(kPersonSchema)}}}}}});
  const json r = create(body, 200, "/v1/chat/completions");
  std::string streamed;
  for (const json& c : openai_stream("/v1/chat/completions", body))
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
      streamed += c["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(streamed, r["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(StructuredOutput, JsonObjectAnswersAreObjects) {
  start();
  for (const int seed : {1, 2}) {
    const json r = create(chat_req({{"temperature", 1.0},
                                    {"seed", seed},
                                    {"max_tokens", 4000},
                                    {"response_format", {{"type", "json_object"}}}}),
                          200, "/v1/chat/completions");
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop") << r;
    const OJson v = parse_content(choice["message"]);
    EXPECT_TRUE(v.is_object()) << v.dump();
  }
}

TEST_F(StructuredOutput, ThinkingReasonsFreelyThenAnswersJson) {
  start();
  // Reasoning is not constrained; the answer after </think> is. With random weights the model
  // rarely closes its reasoning, so the request ends by length: no answer, nothing malformed.
  const json r = create(
      chat_req({{"temperature", 1.0},
                {"seed", 5},
                {"max_tokens", 40},
                {"thinking", {{"type", "enabled"}}},
                {"response_format",
                 {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", json::parse(kPersonSchema)}}}}}}),
      200, "/v1/chat/completions");
  const json& m = r["choices"][0]["message"];
  if (r["choices"][0]["finish_reason"] == "stop") {
    EXPECT_EQ(test::schema_violation(parse_content(m), OJson::parse(kPersonSchema)), "");
  } else {
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  }
}

TEST_F(StructuredOutput, ForcedNamedToolCallValidatesStreamingAndNot) {
  start();
  const OJson params = OJson::parse(kWeatherParams);
  for (const int seed : {1, 2, 3}) {
    const json body = chat_req({{"temperature", 1.0},
                                {"seed", seed},
                                {"tools", weather_tools()},
                                {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
    const json r = create(body, 200, "/v1/chat/completions");
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << r;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r;
    const json& call = choice["message"]["tool_calls"][0];
    EXPECT_EQ(call["function"]["name"], "get_weather");
    const OJson args = OJson::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
    EXPECT_EQ(test::schema_violation(args, params), "") << call;
    // Review finding 1: the stream shows the same call, complete, and the same finish reason.
    std::string name, streamed_args, finish;
    int starts = 0;
    for (const json& c : openai_stream("/v1/chat/completions", body)) {
      if (c["choices"].empty()) continue;
      const json& ch = c["choices"][0];
      if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
      if (!ch["delta"].contains("tool_calls")) continue;
      const json& tc = ch["delta"]["tool_calls"][0];
      if (tc.contains("id")) {
        ++starts;
        name = tc["function"]["name"];
      }
      streamed_args += tc["function"]["arguments"].get<std::string>();
    }
    EXPECT_EQ(starts, 1);
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(finish, "tool_calls");
    EXPECT_EQ(streamed_args, call["function"]["arguments"].get<std::string>());
  }
}

TEST_F(StructuredOutput, RequiredToolChoicePicksADeclaredTool) {
  start();
  for (const int seed : {1, 2, 3, 4}) {
    const json r = create(
        chat_req({{"temperature", 1.0}, {"seed", seed}, {"tools", weather_tools()}, {"tool_choice", "required"}}), 200,
        "/v1/chat/completions");
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << r;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r;
    const json& f = choice["message"]["tool_calls"][0]["function"];
    const OJson args = OJson::parse(f["arguments"].get<std::string>(), nullptr, false);
    if (f["name"] == "get_weather") {
      EXPECT_EQ(test::schema_violation(args, OJson::parse(kWeatherParams)), "") << f;
    } else {
      EXPECT_EQ(f["name"], "get_time");
      EXPECT_EQ(args, OJson::object());
    }
  }
}

TEST_F(StructuredOutput, AnthropicForcedToolUseAgreesStreamingAndNot) {
  start();
  const json body = {{"model", kModel},
                     {"max_tokens", 600},
                     {"temperature", 1.0},
                     {"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
                     {"tools", {{{"name", "get_weather"}, {"input_schema", json::parse(kWeatherParams)}}}},
                     {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}};
  const json r = create(body);
  EXPECT_EQ(r["stop_reason"], "tool_use") << r;
  int uses = 0;
  for (const json& b : r["content"])
    if (b["type"] == "tool_use") {
      ++uses;
      EXPECT_EQ(test::schema_violation(OJson::parse(b["input"].dump()), OJson::parse(kWeatherParams)), "") << b;
    }
  EXPECT_EQ(uses, 1) << r;
  int streamed_uses = 0;
  std::string stop;
  for (const Event& e : stream(body)) {
    if (e.type == "content_block_start" && e.data["content_block"]["type"] == "tool_use") ++streamed_uses;
    if (e.type == "message_delta") stop = e.data["delta"]["stop_reason"];
  }
  EXPECT_EQ(streamed_uses, 1);
  EXPECT_EQ(stop, "tool_use");
}

TEST_F(StructuredOutput, ResponsesTextFormatJsonSchema) {
  start();
  const json r = create(
      {{"model", kModel},
       {"input", "A person, as JSON"},
       {"max_output_tokens", 600},
       {"temperature", 1.0},
       {"reasoning", {{"effort", "none"}}},
       {"text",
        {{"format",
          {{"type", "json_schema"}, {"name", "person"}, {"strict", true}, {"schema", json::parse(kPersonSchema)}}}}}},
      200, "/v1/responses");
  std::string text;
  for (const json& item : r["output"])
    if (item["type"] == "message")
      for (const json& c : item["content"])
        if (c["type"] == "output_text") text += c["text"].get<std::string>();
  const OJson v = OJson::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << r;
  EXPECT_EQ(test::schema_violation(v, OJson::parse(kPersonSchema)), "") << text;
}

TEST_F(StructuredOutput, UnsupportedKeywordIsA400NamingIt) {
  start();
  auto r = post(
      "/v1/chat/completions",
      chat_req({{"response_format",
                 {{"type", "json_schema"},
                  {"json_schema",
                   {{"name", "x"},
                    {"schema",
                     {{"type", "object"}, {"properties", {{"d", {{"type", "string"}, {"format", "date"}}}}}}}}}}}}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const json e = json::parse(r->body);
  EXPECT_EQ(e["error"]["param"], "response_format.json_schema.schema.properties.d.format") << r->body;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("'format'"), std::string::npos) << r->body;
  json tools = weather_tools();
  tools[0]["function"]["parameters"]["properties"]["location"]["pattern"] = "^[A-Z]";
  auto t = post("/v1/chat/completions", chat_req({{"tools", tools}, {"tool_choice", "required"}}));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, 400) << t->body;
  EXPECT_EQ(json::parse(t->body)["error"]["param"], "tools[0].function.parameters.properties.location.pattern")
      << t->body;
}

// Break-in finding 1: an enum at the limit (1000 values) is served in bounded time; one value
// more, or a const over the byte limit, is a 400 naming the schema path and the limit.
TEST_F(StructuredOutput, EnumAtTheLimitIsServedAndOverItIsA400) {
  start();
  auto enum_schema = [](size_t n) {
    json e = json::array();
    for (size_t i = 0; i < n; ++i) e.push_back("v" + std::to_string(i));
    return json{{"type", "object"},
                {"properties", {{"e", {{"enum", e}}}}},
                {"required", {"e"}},
                {"additionalProperties", false}};
  };
  auto rf = [](json schema) {
    return json{{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", std::move(schema)}}}};
  };
  const auto t0 = std::chrono::steady_clock::now();
  const json r = create(chat_req({{"max_tokens", 30}, {"temperature", 0}, {"response_format", rf(enum_schema(1000))}}),
                        200, "/v1/chat/completions");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 30.0) << "the break-in measured 40-200 s before the fix";
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r;
  const OJson v = parse_content(r["choices"][0]["message"]);
  EXPECT_TRUE(v.is_object() && v["e"].is_string()) << v.dump();
  auto over = post("/v1/chat/completions", chat_req({{"response_format", rf(enum_schema(1001))}}));
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 400) << over->body;
  EXPECT_EQ(json::parse(over->body)["error"]["param"], "response_format.json_schema.schema.properties.e.enum");
  EXPECT_NE(over->body.find("more than 1000"), std::string::npos) << over->body;
  auto big = post("/v1/chat/completions", chat_req({{"response_format", rf({{"const", std::string(100000, 'x')}})}}));
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400) << big->body;
  EXPECT_EQ(json::parse(big->body)["error"]["param"], "response_format.json_schema.schema.const");
}

// Break-in finding 2: a forced call whose enum value holds DSML closing markup completes, with the
// exact value as its argument, streaming and not.
TEST_F(StructuredOutput, EnumValueWithDsmlMarkupStaysInsideItsArgument) {
  start();
  const std::string value = "x</｜DSML｜parameter>y";
  const json tools = json::array({{{"type", "function"},
                                   {"function",
                                    {{"name", "f"},
                                     {"parameters",
                                      {{"type", "object"},
                                       {"properties", {{"t", {{"type", "string"}, {"enum", {value}}}}}},
                                       {"required", {"t"}},
                                       {"additionalProperties", false}}}}}}});
  const json body = chat_req({{"max_tokens", 300},
                              {"temperature", 0},
                              {"tools", tools},
                              {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}});
  const json r = create(body, 200, "/v1/chat/completions");
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << r;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r;
  const std::string args = choice["message"]["tool_calls"][0]["function"]["arguments"];
  EXPECT_EQ(json::parse(args), (json{{"t", value}})) << args;
  std::string streamed, content;
  for (const json& c : openai_stream("/v1/chat/completions", body)) {
    if (c["choices"].empty()) continue;
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) streamed += d["tool_calls"][0]["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(content, "");
  EXPECT_EQ(streamed, args);
}

// Break-in finding 3: constrained top_logprobs list only allowed tokens, never a null logprob.
TEST_F(StructuredOutput, ConstrainedTopLogprobsHoldOnlyAllowedTokens) {
  start();
  const json schema = {{"type", "object"},
                       {"properties", {{"b", {{"type", "boolean"}}}}},
                       {"required", {"b"}},
                       {"additionalProperties", false}};
  const json r = create(chat_req({{"max_tokens", 30},
                                  {"temperature", 0},
                                  {"logprobs", true},
                                  {"top_logprobs", 20},
                                  {"response_format",
                                   {{"type", "json_schema"}, {"json_schema", {{"name", "b"}, {"schema", schema}}}}}}),
                        200, "/v1/chat/completions");
  const json& lp = r["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(lp.empty()) << r;
  bool fewer = false;
  for (const json& e : lp) {
    EXPECT_TRUE(e["logprob"].is_number()) << e;
    ASSERT_LE(e["top_logprobs"].size(), 20u);
    fewer = fewer || e["top_logprobs"].size() < 20;
    for (const json& t : e["top_logprobs"]) EXPECT_TRUE(t["logprob"].is_number()) << e;
  }
  EXPECT_TRUE(fewer) << "after {\"b\": only t/f (and a space) may follow: " << lp;
}

// Break-in finding 4: a stop string does not cut constrained JSON (it is not applied under a grammar).
TEST_F(StructuredOutput, StopStringsDoNotCutConstrainedJson) {
  start();
  for (const int seed : {1, 2}) {
    const json r = create(chat_req({{"temperature", 1.0},
                                    {"seed", seed},
                                    {"stop", {"\"", ":"}},
                                    {"response_format",
                                     {{"type", "json_schema"},
                                      {"json_schema", {{"name", "person"}, {"schema", json::parse(kPersonSchema)}}}}}}),
                          200, "/v1/chat/completions");
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop") << r;
    const OJson v = parse_content(choice["message"]);
    EXPECT_EQ(test::schema_violation(v, OJson::parse(kPersonSchema)), "") << v.dump();
  }
}

// Break-in finding 7: an unsatisfiable enum, a missing or malformed json_schema.name are 400s.
TEST_F(StructuredOutput, UnsatisfiableEnumAndBadSchemaNameAre400s) {
  start();
  auto status_param = [&](const json& rf) {
    auto r = post("/v1/chat/completions", chat_req({{"response_format", rf}}));
    EXPECT_TRUE(r);
    return r ? std::make_pair(r->status, json::parse(r->body)["error"]["param"]) : std::make_pair(0, json());
  };
  const json bad_enum = {{"type", "json_schema"},
                         {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"enum", {1, 2}}}}}}};
  EXPECT_EQ(status_param(bad_enum), std::make_pair(400, json("response_format.json_schema.schema.enum[0]")));
  const json no_name = {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "object"}}}}}};
  EXPECT_EQ(status_param(no_name), std::make_pair(400, json("response_format.json_schema.name")));
  const json bad_name = {{"type", "json_schema"}, {"json_schema", {{"name", "a b"}, {"schema", {{"type", "object"}}}}}};
  EXPECT_EQ(status_param(bad_name), std::make_pair(400, json("response_format.json_schema.name")));
  const json long_name = {{"type", "json_schema"},
                          {"json_schema", {{"name", std::string(65, 'a')}, {"schema", {{"type", "object"}}}}}};
  EXPECT_EQ(status_param(long_name), std::make_pair(400, json("response_format.json_schema.name")));
}

// Break-in finding 7: logit_bias is validated and applied; HEAD answers as GET; /favicon.ico is 204.
TEST_F(StructuredOutput, LogitBiasHeadAndFavicon) {
  start();
  for (const json& bad : {json("x"), json{{"abc", 1}}, json{{"5", 101}}, json{{"5", "1"}}, json{{"-1", 1}},
                          json{{"99999999", 1}}}) {
    auto r = post("/v1/completions", {{"model", kModel}, {"prompt", "hi"}, {"max_tokens", 2}, {"logit_bias", bad}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad << " " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], "logit_bias") << r->body;
  }
  const tokenizer::Tokenizer* tok = &suite_tokenizer();
  const std::vector<int32_t> ids = tok->encode("hello", false);
  ASSERT_FALSE(ids.empty());
  const json r = create({{"model", kModel},
                         {"prompt", "Once upon"},
                         {"max_tokens", 3},
                         {"temperature", 0},
                         {"logit_bias", {{std::to_string(ids[0]), 100}}}},
                        200, "/v1/completions");
  const std::vector<int32_t> three = {ids[0], ids[0], ids[0]};
  EXPECT_EQ(r["choices"][0]["text"], tok->decode(three)) << r;
  httplib::Client c("127.0.0.1", srv_->port());
  auto h = c.Head("/v1/models");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->body, "");
  auto f = c.Get("/favicon.ico");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->status, 204);
}

// Break-in finding 5: a forced call cut by max_tokens anywhere (mid-tag, mid-character, mid-value)
// ends with finish_reason length, no markup and no U+FFFD in content, the same streamed and not.
TEST_F(StructuredOutput, ForcedCallCutByMaxTokensLeaksNoMarkup) {
  start();
  for (const int seed : {1, 6}) {
    for (const int max_tokens : {3, 5, 8, 12, 17, 25}) {
      const json body = chat_req({{"temperature", 1.0},
                                  {"seed", seed},
                                  {"max_tokens", max_tokens},
                                  {"tools", weather_tools()},
                                  {"tool_choice", "required"}});
      const json r = create(body, 200, "/v1/chat/completions");
      const json& choice = r["choices"][0];
      const json& msg = choice["message"];
      const std::string content = msg["content"].is_string() ? msg["content"].get<std::string>() : "";
      EXPECT_EQ(content, "") << r;
      std::string streamed, finish;
      for (const json& c : openai_stream("/v1/chat/completions", body)) {
        if (c["choices"].empty()) continue;
        const json& ch = c["choices"][0];
        if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
        if (ch["delta"].contains("content") && ch["delta"]["content"].is_string())
          streamed += ch["delta"]["content"].get<std::string>();
      }
      EXPECT_EQ(streamed, "") << "seed " << seed << " max_tokens " << max_tokens;
      EXPECT_EQ(finish, choice["finish_reason"]) << r;
      if (choice["finish_reason"] == "length") {
        EXPECT_FALSE(msg.contains("tool_calls") && !msg["tool_calls"].empty()) << r;
      }
    }
  }
}

// Break-in issue 20 item 4, finding 1: an answer the schema lets hold the text "</think>" keeps it
// (the parser drops only the </think> token, which the grammar never allows), on chat completions,
// streamed and not, on /v1/responses text.format and in an Anthropic forced tool call.
TEST_F(StructuredOutput, ThinkCloseTextInAnAnswerIsKept) {
  start();
  const json rf = {{"type", "json_schema"},
                   {"json_schema", {{"name", "s"}, {"schema", {{"type", "string"}, {"enum", {"</think>"}}}}}}};
  const json body = chat_req({{"temperature", 0}, {"max_tokens", 40}, {"response_format", rf}});
  const json r = create(body, 200, "/v1/chat/completions");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r;
  EXPECT_EQ(r["choices"][0]["message"]["content"], "\"</think>\"") << r;
  std::string streamed;
  for (const json& c : openai_stream("/v1/chat/completions", body))
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
      streamed += c["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(streamed, "\"</think>\"");
  const json rr = create({{"model", kModel},
                          {"input", "give json"},
                          {"max_output_tokens", 40},
                          {"temperature", 0},
                          {"reasoning", {{"effort", "none"}}},
                          {"text",
                           {{"format",
                             {{"type", "json_schema"},
                              {"name", "s"},
                              {"schema", {{"type", "string"}, {"enum", {"</think>"}}}}}}}}},
                         200, "/v1/responses");
  std::string text;
  for (const json& item : rr["output"])
    if (item["type"] == "message")
      for (const json& c : item["content"])
        if (c["type"] == "output_text") text += c["text"].get<std::string>();
  EXPECT_EQ(text, "\"</think>\"") << rr;
  const json a = create({{"model", kModel},
                         {"max_tokens", 600},
                         {"temperature", 0},
                         {"messages", {{{"role", "user"}, {"content", "tag?"}}}},
                         {"tools",
                          {{{"name", "f"},
                            {"input_schema",
                             {{"type", "object"},
                              {"properties",
                               {{"t", {{"type", "string"}, {"enum", {"</think>"}}}},
                                {"o", {{"type", "object"},
                                       {"properties", {{"u", {{"type", "string"}, {"enum", {"a</think>"}}}}}},
                                       {"required", {"u"}}}}}},
                              {"required", {"t", "o"}}}}}}},
                         {"tool_choice", {{"type", "tool"}, {"name", "f"}}}});
  EXPECT_EQ(a["stop_reason"], "tool_use") << a;
  int uses = 0;
  for (const json& b : a["content"])
    if (b["type"] == "tool_use") {
      ++uses;
      EXPECT_EQ(b["input"], (json{{"t", "</think>"}, {"o", {{"u", "a</think>"}}}})) << b;
    }
  EXPECT_EQ(uses, 1) << a;
}

// Break-in issue 20 item 4, finding 2: with thinking on and a response_format, an end-of-sequence
// token cannot end the generation during reasoning (it is masked until the grammar's answer is
// complete): even with EOS favoured by logit_bias, the answer is "length" or a valid "stop".
TEST_F(StructuredOutput, EosDuringReasoningCannotEndAConstrainedAnswer) {
  start();
  const tokenizer::Tokenizer* tok = &suite_tokenizer();
  const std::string eos = std::to_string(*tok->token_to_id("<｜end▁of▁sentence｜>"));
  const std::string user = std::to_string(*tok->token_to_id("<｜User｜>"));
  const std::string close = std::to_string(*tok->token_to_id("</think>"));
  const json rf = {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", json::parse(kPersonSchema)}}}};
  const json r = create(chat_req({{"temperature", 0},
                                  {"max_tokens", 20},
                                  {"thinking", {{"type", "enabled"}}},
                                  {"logit_bias", {{eos, 100}, {user, 100}}},
                                  {"response_format", rf}}),
                        200, "/v1/chat/completions");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << r;  // before the fix: "stop", content ""
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_string()) << r;
  // The </think> token favoured too: reasoning ends at once, then the answer follows the schema and
  // EOS ends it when it is complete.
  const json s = create(chat_req({{"temperature", 0},
                                  {"max_tokens", 600},
                                  {"thinking", {{"type", "enabled"}}},
                                  {"logit_bias", {{eos, 100}, {close, 100}}},
                                  {"response_format", rf}}),
                        200, "/v1/chat/completions");
  EXPECT_EQ(s["choices"][0]["finish_reason"], "stop") << s;
  EXPECT_EQ(test::schema_violation(parse_content(s["choices"][0]["message"]), OJson::parse(kPersonSchema)), "") << s;
}

// Break-in issue 20 item 4, findings 5 and 6: response_format with tools and tool_choice "auto" is a
// 400 (the grammar would make a tool call impossible); "none" answers with the schema. Duplicate
// tool names are 400s on chat completions and /v1/responses (and /v1/messages).
TEST_F(StructuredOutput, ResponseFormatWithAutoToolsAndDuplicateToolNamesAre400s) {
  start();
  const json rf = {{"type", "json_object"}};
  auto err = [&](const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return std::make_pair(0, json());
    const json e = json::parse(r->body);
    return std::make_pair(r->status, e["error"].is_object() ? e["error"].value("param", json()) : json(e["error"]));
  };
  EXPECT_EQ(err("/v1/chat/completions", chat_req({{"tools", weather_tools()}, {"response_format", rf}})),
            std::make_pair(400, json("tool_choice")));
  EXPECT_EQ(err("/v1/chat/completions",
                chat_req({{"tools", weather_tools()}, {"tool_choice", "auto"}, {"response_format", rf}})),
            std::make_pair(400, json("tool_choice")));
  const json none = create(
      chat_req({{"tools", weather_tools()}, {"tool_choice", "none"}, {"temperature", 1.0}, {"seed", 1},
                {"max_tokens", 4000}, {"response_format", rf}}),
      200, "/v1/chat/completions");
  EXPECT_EQ(none["choices"][0]["finish_reason"], "stop") << none;
  EXPECT_TRUE(parse_content(none["choices"][0]["message"]).is_object());
  const json rtools = json::array({{{"type", "function"}, {"name", "f"}}, {{"type", "function"}, {"name", "g"}}});
  EXPECT_EQ(err("/v1/responses", {{"model", kModel},
                                  {"input", "hi"},
                                  {"tools", rtools},
                                  {"text", {{"format", {{"type", "json_object"}}}}}}),
            std::make_pair(400, json("tool_choice")));

  json dup = weather_tools();
  dup[1]["function"]["name"] = "get_weather";
  EXPECT_EQ(err("/v1/chat/completions", chat_req({{"tools", dup}})), std::make_pair(400, json("tools[1].function.name")));
  json rdup = rtools;
  rdup[1]["name"] = "f";
  EXPECT_EQ(err("/v1/responses", {{"model", kModel}, {"input", "hi"}, {"tools", rdup}}),
            std::make_pair(400, json("tools[1].name")));
  auto m = post("/v1/messages", {{"model", kModel},
                                 {"max_tokens", 10},
                                 {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                 {"tools", {{{"name", "f"}, {"input_schema", {{"type", "object"}}}},
                                            {{"name", "f"}, {"input_schema", {{"type", "object"}}}}}}});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 400) << m->body;
  EXPECT_NE(m->body.find("unique"), std::string::npos) << m->body;
}

// Break-in issue 20 item 4, finding 7: a 405 names the allowed methods (Allow), json_schema.strict
// must be a boolean, and a number beyond a double (logit_bias 1e400) is a 400 about its range.
TEST_F(StructuredOutput, AllowHeaderStrictBooleanAndHugeNumbers) {
  start();
  httplib::Client c("127.0.0.1", srv_->port());
  auto g = c.Get("/v1/chat/completions");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 405);
  EXPECT_EQ(g->get_header_value("Allow"), "POST");
  auto p = c.Post("/v1/models", "{}", "application/json");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 405);
  EXPECT_EQ(p->get_header_value("Allow"), "GET, HEAD");
  auto d = c.Post("/v1/responses/resp_x", "{}", "application/json");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 405);
  EXPECT_EQ(d->get_header_value("Allow"), "GET, HEAD, DELETE");

  auto strict = post("/v1/chat/completions",
                     chat_req({{"response_format",
                                {{"type", "json_schema"},
                                 {"json_schema", {{"name", "x"}, {"strict", "yes"}, {"schema", {{"type", "object"}}}}}}}}));
  ASSERT_TRUE(strict);
  EXPECT_EQ(strict->status, 400) << strict->body;
  EXPECT_EQ(json::parse(strict->body)["error"]["param"], "response_format.json_schema.strict") << strict->body;
  auto rstrict = post("/v1/responses", {{"model", kModel},
                                        {"input", "hi"},
                                        {"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"strict", 1},
                                                              {"schema", {{"type", "object"}}}}}}}});
  ASSERT_TRUE(rstrict);
  EXPECT_EQ(rstrict->status, 400) << rstrict->body;
  EXPECT_EQ(json::parse(rstrict->body)["error"]["param"], "text.format.strict") << rstrict->body;

  auto huge = c.Post("/v1/chat/completions",
                     R"({"model":"deepseek-v4.1-flash","messages":[{"role":"user","content":"hi"}],"logit_bias":{"5":1e400}})",
                     "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 400) << huge->body;
  EXPECT_NE(huge->body.find("outside the range of a double"), std::string::npos) << huge->body;
  EXPECT_NE(huge->body.find("1e400"), std::string::npos) << huge->body;
}

// Break-in issue 20 item 4, finding 4: a forced call among 130 tools (over the old 62) and a schema
// of 100 properties (over the old 62) are served and their answers validate.
TEST_F(StructuredOutput, ManyToolsAndProperties) {
  start();
  json tools = json::array();
  for (int i = 0; i < 130; ++i)
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", "t" + std::to_string(i)},
                       {"parameters", {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}}}}}});
  const json r = create(
      chat_req({{"temperature", 1.0}, {"seed", 3}, {"tools", tools}, {"tool_choice", "required"}}), 200,
      "/v1/chat/completions");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r;
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r;
  const std::string name = r["choices"][0]["message"]["tool_calls"][0]["function"]["name"];
  EXPECT_EQ(name[0], 't');
  EXPECT_LT(std::stoi(name.substr(1)), 130);
  OJson props = OJson::object();
  for (int i = 0; i < 100; ++i) props["p" + std::to_string(i)] = OJson{{"type", "boolean"}};
  const OJson schema = {{"type", "object"}, {"properties", props}, {"required", {"p99"}}, {"additionalProperties", false}};
  const json s = create(chat_req({{"temperature", 1.0},
                                  {"seed", 2},
                                  {"max_tokens", 3000},
                                  {"response_format",
                                   {{"type", "json_schema"},
                                    {"json_schema", {{"name", "many"}, {"schema", json::parse(schema.dump())}}}}}}),
                        200, "/v1/chat/completions");
  EXPECT_EQ(s["choices"][0]["finish_reason"], "stop") << s;
  EXPECT_EQ(test::schema_violation(parse_content(s["choices"][0]["message"]), schema), "") << s;
}

}  // namespace
}  // namespace strata::server
