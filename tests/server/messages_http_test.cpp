// POST /v1/messages and /v1/messages/count_tokens end to end over loopback HTTP against a
// synthesized tiny V4.1 checkpoint: the message shape, thinking / text / tool_use blocks, a tool round
// trip, stop reasons, the SSE event lifecycle, token counting, Anthropic's error envelope on every
// failure of these routes, and x-api-key. Text comes from the TEST ONLY scripted output (random weights).
#include <gtest/gtest.h>

#include <regex>

#include "tests/server/api_serve_fixture.h"

namespace strata::server {
namespace {

using namespace testing_api;

const json kTools = json::parse(R"([{"name":"get_weather","description":"Weather","input_schema":{"type":"object",
  "properties":{"location":{"type":"string"},"days":{"type":"integer"}},"required":["location"]}}])");
const std::string kToolScript =
    "Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
    "name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" "
    "string=\"false\">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

class Messages : public ApiServe {
 protected:
  static json req(const std::string& text, json extra = json::object()) {
    json b = {{"model", kModel}, {"max_tokens", 64}, {"messages", {{{"role", "user"}, {"content", text}}}}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }
};

TEST_F(Messages, NonStreamingShapeAndUsage) {
  start();
  const json m = create(req("Hi", {{"system", "Be brief."}, {"strata_test_output", "Hello!" + kEos}}));
  EXPECT_TRUE(std::regex_match(m["id"].get<std::string>(), std::regex("msg_[0-9a-f]{32}"))) << m;
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], kModel);
  EXPECT_EQ(m["content"], json::parse(R"([{"type":"text","text":"Hello!"}])"));  // thinking off by default
  EXPECT_EQ(m["stop_reason"], "end_turn");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  const json& u = m["usage"];
  EXPECT_GT(u["input_tokens"].get<int>(), 0);
  EXPECT_EQ(u["cache_read_input_tokens"], 0);
  EXPECT_EQ(u["output_tokens"], 3);  // "Hello", "!" and EOS (tokens of the tiny tokenizer)
  // count_tokens renders the same prompt.
  auto r = post("/v1/messages/count_tokens", req("Hi", {{"system", "Be brief."}}));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["input_tokens"],
            u["input_tokens"].get<int>() + u["cache_read_input_tokens"].get<int>());
}

// The response names the model the request asked for (an alias stays the alias), as Anthropic does;
// Anthropic's narrower ranges are 400 invalid_request_error in its envelope.
TEST_F(Messages, EchoesTheModelAndChecksAnthropicsRanges) {
  start();
  json b = req("Hi", {{"strata_test_output", "Hello!" + kEos}});
  b["model"] = "deepseek-chat";
  EXPECT_EQ(create(b)["model"], "deepseek-chat");
  b["stream"] = true;
  auto r = post("/v1/messages", b);
  ASSERT_TRUE(r);
  EXPECT_EQ(parse_events(r->body)[0].data["message"]["model"], "deepseek-chat");
  for (const json& extra : {json{{"temperature", 1.5}}, json{{"top_k", -1}}, json{{"stop_sequences", "END"}}}) {
    auto e = post("/v1/messages", req("Hi", extra));
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400) << extra;
    const json j = json::parse(e->body);
    EXPECT_EQ(j["type"], "error");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_NE(j["error"]["message"].get<std::string>().find(extra.begin().key()), std::string::npos) << j;
  }
  auto e = post("/v1/messages", req(""));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400) << "empty content";
}

TEST_F(Messages, StopReasons) {
  start();
  json m = create(req("Hi", {{"stop_sequences", {"END"}}, {"strata_test_output", "abc END def" + kEos}}));
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "END");
  EXPECT_EQ(m["content"][0]["text"], "abc ");
  m = create(req("Hi", {{"max_tokens", 2}}));
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_EQ(m["usage"]["output_tokens"], 2);
  // Thinking on, max_tokens spent in reasoning: one thinking block.
  m = create(req("Hi", {{"max_tokens", 3},
                        {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                        {"strata_test_output", "Let me think about it"}}));
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  ASSERT_EQ(m["content"].size(), 1u) << m;
  EXPECT_EQ(m["content"][0]["type"], "thinking");
}

TEST_F(Messages, ToolRoundTrip) {
  start();
  const json thinking = {{"type", "enabled"}, {"budget_tokens", 1024}};
  json m = create(
      req("Weather in Paris?", {{"tools", kTools}, {"thinking", thinking}, {"strata_test_output", kToolScript}}));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 2u) << m;
  EXPECT_EQ(m["content"][0], json::parse(R"({"type":"thinking","thinking":"Need data.","signature":""})"));
  const json& use = m["content"][1];
  EXPECT_EQ(use["type"], "tool_use");
  EXPECT_TRUE(std::regex_match(use["id"].get<std::string>(), std::regex("toolu_[0-9a-f]{32}"))) << use;
  EXPECT_EQ(use["name"], "get_weather");
  EXPECT_EQ(use["input"], json::parse(R"({"location":"Paris","days":3})"));
  // The client runs the tool and sends the whole exchange back.
  json msgs = json::array(
      {{{"role", "user"}, {"content", "Weather in Paris?"}},
       {{"role", "assistant"}, {"content", m["content"]}},
       {{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", use["id"]}, {"content", "18 C"}}}}}});
  m = create({{"model", kModel},
              {"max_tokens", 64},
              {"messages", msgs},
              {"tools", kTools},
              {"thinking", thinking},
              {"strata_test_output", "Got it.</think>18 C in Paris." + kEos}});
  EXPECT_EQ(m["stop_reason"], "end_turn");
  EXPECT_EQ(m["content"], json::parse(R"([{"type":"thinking","thinking":"Got it.","signature":""},
                                          {"type":"text","text":"18 C in Paris."}])"));
  // The second turn reused the first one's prompt (Anthropic's cache_read_input_tokens).
  EXPECT_GT(m["usage"]["cache_read_input_tokens"].get<int>(), 0) << m;
}

TEST_F(Messages, StreamEventLifecycle) {
  start();
  const std::vector<Event> ev = stream(req("Weather?", {{"tools", kTools},
                                                        {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                                                        {"strata_test_output", kToolScript}}));
  ASSERT_GE(ev.size(), 8u);
  EXPECT_EQ(ev[0].type, "message_start");
  const json& start_msg = ev[0].data["message"];
  EXPECT_TRUE(std::regex_match(start_msg["id"].get<std::string>(), std::regex("msg_[0-9a-f]{32}")));
  EXPECT_EQ(start_msg["content"], json::array());
  EXPECT_TRUE(start_msg["stop_reason"].is_null());
  EXPECT_EQ(start_msg["usage"]["output_tokens"], 0);
  std::vector<std::string> blocks;
  std::string thinking, input;
  int open = -1;
  size_t i = 1;
  for (; i < ev.size() && ev[i].type.rfind("content_block_", 0) == 0; ++i) {
    const json& d = ev[i].data;
    if (ev[i].type == "content_block_start") {
      EXPECT_EQ(open, -1);
      open = d["index"];
      EXPECT_EQ(open, static_cast<int>(blocks.size()));
      blocks.push_back(d["content_block"]["type"]);
    } else if (ev[i].type == "content_block_delta") {
      EXPECT_EQ(d["index"], open);
      const std::string kind = d["delta"]["type"];
      if (kind == "thinking_delta")
        thinking += d["delta"]["thinking"].get<std::string>();
      else if (kind == "input_json_delta")
        input += d["delta"]["partial_json"].get<std::string>();
      else
        ADD_FAILURE() << "unexpected delta " << d;
    } else {
      EXPECT_EQ(ev[i].type, "content_block_stop");
      EXPECT_EQ(d["index"], open);
      open = -1;
    }
  }
  EXPECT_EQ(open, -1);
  EXPECT_EQ(blocks, (std::vector<std::string>{"thinking", "tool_use"}));
  EXPECT_EQ(thinking, "Need data.");
  EXPECT_EQ(json::parse(input), json::parse(R"({"location":"Paris","days":3})"));
  ASSERT_EQ(i + 2, ev.size()) << "after the blocks: message_delta and message_stop only";
  EXPECT_EQ(ev[i].type, "message_delta");
  EXPECT_EQ(ev[i].data["delta"]["stop_reason"], "tool_use");
  EXPECT_GT(ev[i].data["usage"]["output_tokens"].get<int>(), 0);
  EXPECT_EQ(ev[i + 1].type, "message_stop");
  for (const Event& e : ev) EXPECT_EQ(e.data.dump().find("DSML"), std::string::npos);
}

TEST_F(Messages, ErrorsUseAnthropicsEnvelope) {
  ServerOptions o;
  o.ctx = 64;
  start(o);
  expect_error(post("/v1/messages", {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}), 400,
               "invalid_request_error", "max_tokens");
  expect_error(post("/v1/messages", req("x", {{"model", "gpt-x"}})), 404, "not_found_error", "gpt-x");
  expect_error(post("/v1/messages", req("x", {{"messages", json::array()}})), 400, "invalid_request_error", "messages");
  expect_error(post("/v1/messages", req("x", {{"max_tokens", 60}})), 400, "invalid_request_error", "64");
  httplib::Client c("127.0.0.1", srv_->port());
  expect_error(c.Get("/v1/messages"), 405, "invalid_request_error", "GET");
  expect_error(c.Post("/v1/messages", "{\"model\":", "application/json"), 400, "invalid_request_error", "JSON");
  expect_error(c.Post("/v1/messages/nope", "{}", "application/json"), 404, "not_found_error", "Invalid URL");
  expect_error(post("/v1/messages/count_tokens", json::object()), 400, "invalid_request_error", "model");
  // The chat API keeps OpenAI's envelope; the server is still fine.
  auto r = post("/v1/chat/completions", json::object());
  ASSERT_TRUE(r);
  EXPECT_TRUE(json::parse(r->body)["error"].contains("param")) << r->body;
  EXPECT_EQ(create(req("x", {{"max_tokens", 2}}))["type"], "message");
}

TEST_F(Messages, ApiKeyFromXApiKeyOrBearer) {
  ServerOptions o;
  o.api_key = "sekret";
  start(o);
  const json body = req("Hi", {{"max_tokens", 1}});
  expect_error(post("/v1/messages", body), 401, "authentication_error", "x-api-key");
  expect_error(post("/v1/messages", body, {{"x-api-key", "wrong"}}), 401, "authentication_error", "Incorrect");
  auto r = post("/v1/messages", body, {{"x-api-key", "sekret"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  r = post("/v1/messages", body, {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  // The OpenAI routes take either header too.
  r = post("/v1/chat/completions", {{"model", kModel}, {"max_tokens", 1}, {"messages", body["messages"]}},
           {{"x-api-key", "sekret"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace strata::server
