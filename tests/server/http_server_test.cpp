// strata serve end to end over loopback HTTP (server/http_server.h) against a synthesized tiny V4.1
// checkpoint: health and models while loading, authentication, every documented error status,
// non-streaming and streaming shapes, usage counts, tool calls / reasoning / stop strings /
// length inside reasoning driven by the TEST ONLY scripted output, prefix reuse, overload,
// keep-alive comments, and a client that disconnects cancelling its generation.
// The weights are random: tests assert protocol behaviour, never text.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "chat/render.h"
#include "tests/server/api_serve_fixture.h"

namespace strata::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

const std::string kModel = "deepseek-v4.1-flash";

// One SSE response split into events.
struct Sse {
  std::vector<json> events;  // data: payloads, parsed (not [DONE])
  bool done = false;         // ended with data: [DONE]
  int comments = 0;          // ": ..." lines
  std::string raw;
};

Sse parse_sse(const std::string& body) {
  Sse s;
  s.raw = body;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind(": ", 0) == 0) {
      ++s.comments;
    } else if (ev == "data: [DONE]") {
      s.done = true;
    } else if (ev.rfind("data: ", 0) == 0) {
      EXPECT_FALSE(s.done) << "event after [DONE]";
      s.events.push_back(json::parse(ev.substr(6)));
    } else if (!ev.empty()) {
      ADD_FAILURE() << "unexpected SSE text: " << ev;
    }
  }
  return s;
}

// A raw HTTP/1.1 connection, for reading a stream partly and then hanging up.
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  ~RawConn() { close(); }
  void post(const std::string& path, const std::string& body) {
    send_raw("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  void send_raw(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
  // Reads for `d` (or until `until` appears); returns everything read so far.
  const std::string& read_for(std::chrono::milliseconds d, const std::string& until = "") {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      if (!until.empty() && got_.find(until) != std::string::npos) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      got_.append(buf, static_cast<size_t>(n));
    }
    return got_;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // True once read_for saw the server end the connection (end of file or reset).
  bool closed() const { return eof_; }

 private:
  int fd_ = -1;
  bool eof_ = false;
  std::string got_;
};

// The shared tiny-checkpoint server fixture (tests/server/api_serve_fixture.h) plus the chat and
// /metrics helpers of this file's tests.
class Serve : public testing_api::ApiServe {
 protected:
  httplib::Client client() {
    httplib::Client c("127.0.0.1", srv_->port());
    c.set_read_timeout(60, 0);
    return c;
  }
  json chat(const json& body, int want_status = 200) {
    auto r = post("/v1/chat/completions", body);
    EXPECT_TRUE(r) << "no response";
    if (!r) return json();
    EXPECT_EQ(r->status, want_status) << r->body;
    return json::parse(r->body, nullptr, false);
  }
  Sse chat_stream(json body) {
    body["stream"] = true;
    auto r = post("/v1/chat/completions", body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    return parse_sse(r->body);
  }
  // Prometheus value of `name` (first sample; a name may carry labels), -1 if absent.
  // One /metrics exposition. Values compared with each other must come from one scrape: a step's
  // observation lands after its callbacks have answered the client, so two scrapes may straddle it.
  std::string scrape() {
    auto c = client();
    auto r = c.Get("/metrics");
    return r ? r->body : std::string();
  }
  static double metric_in(const std::string& body, const std::string& name) {
    const size_t at = body.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stod(body.substr(at + name.size() + 2));
  }
  double metric(const std::string& name) { return metric_in(scrape(), name); }
  // Waits until `name` == v (or timeout); returns the last value.
  double wait_metric(const std::string& name, double v, std::chrono::milliseconds timeout = 30000ms) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    double x = metric(name);
    while (x != v && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(10ms);
      x = metric(name);
    }
    return x;
  }
  static json user(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }
  static json req(const json& messages, json extra = json::object()) {
    json b = {{"model", kModel}, {"messages", messages}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }
};

const json kTools = json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather",
  "parameters":{"type":"object","properties":{"location":{"type":"string"},"days":{"type":"integer"}},"required":["location"]}}}])");
const std::string kToolScript =
    "Need data.</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
    "name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" "
    "string=\"false\">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

TEST_F(Serve, HealthAndModelsWhileLoading) {
  start({}, /*attach=*/false);
  auto c = client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body)["error"]["code"], "model_loading");
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(json::parse(m->body)["data"][0]["id"], kModel);
  const json j = chat(req(user("Hi")), 503);
  EXPECT_EQ(j["error"]["code"], "model_loading");
  attach_model();
  h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body), json({{"status", "ok"}}));
  m = c.Get("/v1/models/" + kModel);
  ASSERT_TRUE(m);
  const json model = json::parse(m->body);
  EXPECT_EQ(model["object"], "model");
  EXPECT_EQ(model["owned_by"], "strata");
  EXPECT_GT(model["context_length"].get<int64_t>(), 0);
  EXPECT_EQ(model["max_model_len"], model["context_length"]);
  m = c.Get("/v1/models/other");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 404);
  EXPECT_EQ(json::parse(m->body)["error"]["code"], "model_not_found");
}

TEST_F(Serve, PortInUseIsAnError) {
  start({}, /*attach=*/false);
  ServerOptions o;
  o.port = srv_->port();
  HttpServer second(o, nullptr);
  const Status s = second.start();
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.to_string();
  EXPECT_NE(s.message().find(std::to_string(o.port)), std::string::npos);
  ServerOptions bad;
  bad.parallel = 0;
  EXPECT_EQ(HttpServer(bad, nullptr).start().code(), StatusCode::kInvalidArgument);
}

TEST_F(Serve, ApiKey) {
  ServerOptions o;
  o.api_key = "sekret";
  start(o);
  const json body = req(user("Hi"), {{"max_tokens", 1}});
  auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "authentication_error");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
  r = post("/v1/chat/completions", body, {{"Authorization", "Bearer wrong"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = post("/v1/chat/completions", body, {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto c = client();
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/metrics")->status, 200);
}

// Requests answered before their body is read end their connection (nothing of the body is parsed
// as a next request); a body is never buffered where none is taken; a POST without a body is not
// waited for.
TEST_F(Serve, EarlyAnswersEndTheConnection) {
  ServerOptions o;
  o.body_limit_bytes = 4096;
  o.api_key = "sekret";
  start(o);
  const std::string auth = "Authorization: Bearer sekret\r\n";
  auto ask = [&](const std::string& raw, const std::string& until) {
    RawConn c(srv_->port());
    c.send_raw(raw);
    std::string got = c.read_for(std::chrono::seconds(10), until);
    c.send_raw("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");  // must not be answered
    got = c.read_for(std::chrono::seconds(10));
    EXPECT_TRUE(c.closed()) << raw.substr(0, 60);
    EXPECT_EQ(got.find("HTTP/1.1", 1), std::string::npos) << "answered after an unread body: " << got;
    return got;
  };
  // A wrong key with a body: 401, and the body is not read as a next request.
  std::string got = ask("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2000\r\n\r\n"
                        "GET /v1/models HTTP/1.1\r\n\r\n",
                        "invalid_api_key");
  EXPECT_EQ(got.rfind("HTTP/1.1 401", 0), 0u) << got;
  EXPECT_EQ(got.find("Keep-Alive"), std::string::npos) << "a closing response says only Connection: close: " << got;
  // A body on a method that takes none, framings a proxy could read otherwise
  // (request smuggling), a chunked body where none is taken (refused, not buffered), a length
  // past int64 (413, not "not a number"), multipart (415): refused, and the connection ends.
  struct Case {
    std::string request;
    const char* status;
    const char* says;  // "" = only the status is checked
  };
  const std::string post_completions = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth;
  const std::string post_chat = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth;
  const Case cases[] = {
      {"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 35\r\n\r\n", "HTTP/1.1 400",
       "GET requests take no body"},
      {post_completions + "Transfer-Encoding: gzip, chunked\r\nContent-Length: 5\r\n\r\n", "HTTP/1.1 501", ""},
      {post_completions + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", "HTTP/1.1 400", ""},
      {post_completions + "Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}", "HTTP/1.1 400",
       "more than one Content-Length"},
      {"POST /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n400\r\n" +
           std::string(1024, 'x') + "\r\n",
       "HTTP/1.1 400", "takes no chunked request body"},
      {post_chat + "Content-Length: 99999999999999999999999\r\n\r\n", "HTTP/1.1 413", ""},
      {post_chat + "Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 10\r\n\r\n--x--\r\n\r\n",
       "HTTP/1.1 415", ""},
  };
  for (const Case& k : cases) {
    got = ask(k.request, "}}");
    EXPECT_EQ(got.rfind(k.status, 0), 0u) << k.request.substr(0, 60) << "\n" << got;
    if (*k.says) {
      EXPECT_NE(got.find(k.says), std::string::npos) << got;
    }
  }
  // No Content-Length and no Transfer-Encoding: an empty body, answered at once (400: not JSON),
  // and the connection goes on.
  RawConn c(srv_->port());
  c.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "\r\n");
  got = c.read_for(std::chrono::seconds(10), "}}");
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  EXPECT_FALSE(c.closed());
  // A right key without a body keeps the connection: a second request on it is answered.
  c.send_raw("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "\r\n");
  got = c.read_for(std::chrono::seconds(10), "deepseek");
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
}

TEST_F(Serve, DocumentedErrors) {
  ServerOptions o;
  o.body_limit_bytes = 4096;
  o.ctx = 64;
  start(o);
  auto check = [](const httplib::Result& r, int status, const char* type, const char* code) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.contains("error")) << r->body;
    EXPECT_EQ(e["error"]["type"], type) << r->body;
    EXPECT_TRUE(e["error"]["message"].is_string());
    EXPECT_TRUE(e["error"].contains("param"));
    if (code) {
      EXPECT_EQ(e["error"]["code"], code) << r->body;
    } else {
      EXPECT_TRUE(e["error"]["code"].is_null()) << r->body;
    }
  };
  auto c = client();
  auto r = c.Post("/v1/x", "{}", "application/json");
  check(r, 404, "invalid_request_error", nullptr);
  EXPECT_EQ(json::parse(r->body)["error"]["message"], "Invalid URL (POST /v1/x)");
  check(c.Get("/v1/chat/completions"), 405, "invalid_request_error", "method_not_allowed");
  check(c.Post("/health", "{}", "application/json"), 405, "invalid_request_error", "method_not_allowed");
  check(c.Post("/v1/chat/completions", std::string(8000, ' ') + "{}", "application/json"), 413, "invalid_request_error",
        "request_too_large");
  check(c.Post("/v1/chat/completions", "{\"model\":", "application/json"), 400, "invalid_request_error", "invalid_json");
  {
    // A body declared far over the limit is answered at once, before any of it is sent (not after
    // reading it all, or after the 30 s read timeout), and the connection ends: what follows on it
    // (the rest of the body, or a pipelined request) is never parsed as a request.
    RawConn raw(srv_->port());
    raw.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 "Content-Length: 1000000000000\r\n\r\n{");
    raw.read_for(std::chrono::seconds(10), "request_too_large");
    raw.send_raw("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const std::string& got = raw.read_for(std::chrono::seconds(10));
    EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
    EXPECT_EQ(got.find("HTTP/1.1", 1), std::string::npos) << "a request after the unread body was answered: " << got;
    EXPECT_TRUE(raw.closed()) << "the server did not close the connection";
  }
  {
    // "Expect: 100-continue" over the limit: 413 instead of an invitation to upload.
    RawConn raw(srv_->port());
    raw.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n"
                 "Expect: 100-continue\r\n\r\n");
    const std::string& got = raw.read_for(std::chrono::seconds(10), "request_too_large");
    EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got;
  }
  {
    // A chunked body is read through the same cap (it is never buffered past the limit).
    RawConn raw(srv_->port());
    std::string chunks;
    for (int i = 0; i < 3; ++i) chunks += "800\r\n" + std::string(2048, ' ') + "\r\n";
    raw.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n" + chunks + "0\r\n\r\n");
    const std::string& got = raw.read_for(std::chrono::seconds(10), "request_too_large");
    EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got;
  }
  {
    // A Content-Length that is not a byte count: 400 at once, not a wait for a body.
    RawConn raw(srv_->port());
    raw.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n");
    const std::string& got = raw.read_for(std::chrono::seconds(10), "}}");
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
    EXPECT_NE(got.find("Content-Length '-1'"), std::string::npos) << got;
  }
  // A chunked body under the cap is served.
  {
    httplib::Client cc("127.0.0.1", srv_->port());
    const std::string body = req(user("Hi"), {{"max_tokens", 1}}).dump();
    auto r = cc.Post("/v1/chat/completions", [&](size_t off, httplib::DataSink& sink) {
      if (off < body.size()) sink.write(body.data() + off, body.size() - off);
      else sink.done();
      return true;
    }, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  check(post("/v1/chat/completions", req(user("Hi"), {{"model", "gpt-x"}})), 404, "invalid_request_error",
        "model_not_found");
  check(post("/v1/chat/completions", req(user("Hi"), {{"temperature", 9}})), 400, "invalid_request_error",
        "invalid_value");
  check(post("/v1/chat/completions", req(user("Hi"), {{"logprobs", true}, {"top_logprobs", 99}})), 400,
        "invalid_request_error", "invalid_value");
  // Context: a prompt that does not fit, and an explicit max_tokens that does not fit.
  std::string longtext;
  for (int i = 0; i < 100; ++i) longtext += "word ";
  r = post("/v1/chat/completions", req(user(longtext)));
  check(r, 400, "invalid_request_error", "context_length_exceeded");
  r = post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 60}, {"thinking", false}}));
  check(r, 400, "invalid_request_error", "context_length_exceeded");
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("64"), std::string::npos);
  // The server is still fine.
  EXPECT_EQ(post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 2}}))->status, 200);
}

TEST_F(Serve, NonStreamingShapeAndUsage) {
  start();
  const json j = chat(req(user("Hi"), {{"max_tokens", 5}, {"thinking", false}, {"temperature", 0}}));
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["id"].get<std::string>().size(), 9u + 32u);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], kModel);
  EXPECT_EQ(j["system_fingerprint"], "strata-0.1.0");
  const json& ch = j["choices"][0];
  EXPECT_EQ(ch["index"], 0);
  EXPECT_TRUE(ch["logprobs"].is_null());
  EXPECT_EQ(ch["message"]["role"], "assistant");
  EXPECT_TRUE(ch["message"]["content"].is_string());
  EXPECT_FALSE(ch["message"].contains("reasoning_content"));  // thinking off
  EXPECT_FALSE(ch["message"].contains("tool_calls"));
  const json& u = j["usage"];
  // P = the rendered prompt: <BOS><｜User｜>Hi<｜Assistant｜></think>
  EXPECT_EQ(u["prompt_tokens"], 5);
  const int64_t C = u["completion_tokens"];
  if (ch["finish_reason"] == "length") {
    EXPECT_EQ(C, 5);
  } else {
    EXPECT_EQ(ch["finish_reason"], "stop");
    EXPECT_LE(C, 5);
  }
  EXPECT_EQ(u["total_tokens"], 5 + C);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(u["completion_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_EQ(u["prompt_cache_hit_tokens"], 0);
  EXPECT_EQ(u["prompt_cache_miss_tokens"], 5);
  // Greedy and seeded sampling are reproducible.
  const json again = chat(req(user("Hi"), {{"max_tokens", 5}, {"thinking", false}, {"temperature", 0}}));
  EXPECT_EQ(again["choices"][0]["message"]["content"], ch["message"]["content"]);
  const json a = chat(req(user("Hi"), {{"max_tokens", 6}, {"seed", 11}, {"thinking", false}}));
  const json b = chat(req(user("Hi"), {{"max_tokens", 6}, {"seed", 11}, {"thinking", false}}));
  EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
}

TEST_F(Serve, ReasoningOnAndOff) {
  start();
  json j = chat(req(user("Hi"), {{"strata_test_output", "Let me see.</think>It is 4.<｜end▁of▁sentence｜>"}}));
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Let me see.");
  EXPECT_EQ(m["content"], "It is 4.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  // C counts every sampled token incl. </think> and the EOS; R the tokens up to and incl. </think>.
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], 4 + 1);  // "Let me see." + </think>
  EXPECT_EQ(j["usage"]["completion_tokens"], 4 + 1 + 5 + 1);
  j = chat(req(user("Hi"), {{"thinking", false}, {"strata_test_output", "Plain.<｜end▁of▁sentence｜>"}}));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Plain.");
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
}

TEST_F(Serve, ReasoningFieldFlag) {
  ServerOptions o;
  o.reasoning_field = ReasoningField::kBoth;
  start(o);
  const json j = chat(req(user("Hi"), {{"strata_test_output", "R</think>C"}}));
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "R");
  EXPECT_EQ(j["choices"][0]["message"]["reasoning"], "R");
}

TEST_F(Serve, LengthInsideReasoning) {
  start();
  const json j = chat(req(user("Hi"), {{"max_tokens", 3}, {"strata_test_output", "Let me think about this for a while"}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "");
  EXPECT_FALSE(j["choices"][0]["message"]["reasoning_content"].get<std::string>().empty());
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
}

TEST_F(Serve, StopStringsInContentOnly) {
  start();
  const json j = chat(req(user("Hi"), {{"stop", json::array({"END", "zz"})},
                                       {"strata_test_output", "no END here</think>Hello END world"}}));
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "no END here");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST_F(Serve, ToolCallRoundTrip) {
  start();
  json j = chat(req(user("Weather in Paris?"), {{"tools", kTools}, {"strata_test_output", kToolScript}}));
  const json& ch = j["choices"][0];
  EXPECT_EQ(ch["finish_reason"], "tool_calls");
  EXPECT_TRUE(ch["message"]["content"].is_null());
  EXPECT_EQ(ch["message"]["reasoning_content"], "Need data.");
  ASSERT_EQ(ch["message"]["tool_calls"].size(), 1u);
  const json& tc = ch["message"]["tool_calls"][0];
  EXPECT_EQ(tc["type"], "function");
  EXPECT_TRUE(std::regex_match(tc["id"].get<std::string>(), std::regex("call_[0-9a-f]{24}")));
  EXPECT_EQ(tc["function"]["name"], "get_weather");
  EXPECT_EQ(tc["function"]["arguments"], R"({"location": "Paris", "days": 3})");
  // Send the result back: the conversation renders and generates.
  json msgs = user("Weather in Paris?");
  msgs.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ch["message"]["tool_calls"]}});
  msgs.push_back({{"role", "tool"}, {"tool_call_id", tc["id"]}, {"content", R"({"temp_c": 18})"}});
  j = chat(req(msgs, {{"tools", kTools}, {"strata_test_output", "Got it.</think>18 C.<｜end▁of▁sentence｜>"}}));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "18 C.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  // parallel_tool_calls false keeps the first call only.
  const std::string two = "</think><｜DSML｜ calls><｜DSML｜ invoke name=\"get_weather\"></｜DSML｜ invoke><｜DSML｜ invoke "
                          "name=\"get_weather\"></｜DSML｜ invoke></｜DSML｜ calls>";
  j = chat(req(user("x"), {{"tools", kTools}, {"parallel_tool_calls", false}, {"strata_test_output", two}}));
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u);
  j = chat(req(user("x"), {{"tools", kTools}, {"strata_test_output", two}}));
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 2u);
  // A forced named call: thinking off, the parser starts inside the invoke.
  j = chat(req(user("x"), {{"tools", kTools},
                           {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                           {"strata_test_output", "<｜DSML｜ parameter name=\"location\" string=\"true\">Oslo</｜DSML｜ "
                                                  "parameter></｜DSML｜ invoke></｜DSML｜ calls>"}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], R"({"location": "Oslo"})");
}

TEST_F(Serve, StreamingShape) {
  start();
  const Sse s = chat_stream(req(user("Weather?"), {{"tools", kTools}, {"stream_options", {{"include_usage", true}}},
                                                  {"strata_test_output", kToolScript}}));
  ASSERT_TRUE(s.done) << s.raw;
  ASSERT_GE(s.events.size(), 4u);
  const std::string id = s.events[0]["id"];
  const int64_t created = s.events[0]["created"];
  std::string reasoning, args, name, call_id;
  int n_final = 0;
  for (size_t i = 0; i < s.events.size(); ++i) {
    const json& e = s.events[i];
    EXPECT_EQ(e["id"], id);
    EXPECT_EQ(e["created"], created);
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_EQ(e["model"], kModel);
    if (i + 1 == s.events.size()) {  // include_usage: choices [] + usage
      EXPECT_TRUE(e["choices"].empty());
      EXPECT_EQ(e["usage"]["completion_tokens_details"]["reasoning_tokens"], 4);  // "Need data." + </think>
      continue;
    }
    ASSERT_EQ(e["choices"].size(), 1u);
    const json& ch = e["choices"][0];
    const json& d = ch["delta"];
    if (i == 0) {
      EXPECT_EQ(d, json({{"role", "assistant"}, {"content", ""}}));
      continue;
    }
    if (!ch["finish_reason"].is_null()) {
      ++n_final;
      EXPECT_EQ(ch["finish_reason"], "tool_calls");
      EXPECT_TRUE(d.empty());
      continue;
    }
    EXPECT_FALSE(d.empty()) << "empty delta before the last chunk";
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    EXPECT_FALSE(d.contains("content")) << "no content in this script";
    if (d.contains("tool_calls")) {
      const json& tc = d["tool_calls"][0];
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) {
        EXPECT_TRUE(call_id.empty());
        call_id = tc["id"];
        name = tc["function"]["name"];
        EXPECT_EQ(tc["function"]["arguments"], "");
        EXPECT_EQ(tc["type"], "function");
      } else {
        EXPECT_FALSE(call_id.empty()) << "arguments before the call start";
        args += tc["function"]["arguments"].get<std::string>();
      }
    }
    EXPECT_EQ(e.dump().find("DSML"), std::string::npos);
    EXPECT_EQ(e.dump().find("think>"), std::string::npos);
  }
  EXPECT_EQ(n_final, 1);
  EXPECT_EQ(reasoning, "Need data.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(args, R"({"location": "Paris", "days": 3})");
}

TEST_F(Serve, CompletionsEndpoint) {
  start();
  auto r = post("/v1/completions", {{"model", kModel}, {"prompt", "Once upon a time"}, {"temperature", 0}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_TRUE(j["choices"][0]["text"].is_string());
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 16);  // OpenAI's default max_tokens
  r = post("/v1/completions", {{"model", kModel}, {"prompt", "x"}, {"strata_test_output", "a</think>b STOP c"},
                               {"stop", "STOP"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "a</think>b ");  // raw text: no reasoning split
  r = post("/v1/completions", {{"model", kModel}, {"prompt", json::array({0, 100, 200})}, {"max_tokens", 3}, {"stream", true}});
  ASSERT_TRUE(r);
  const Sse s = parse_sse(r->body);
  EXPECT_TRUE(s.done);
  ASSERT_FALSE(s.events.empty());
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"].is_null(), false);
  r = post("/v1/completions", {{"model", kModel}, {"prompt", json::array({0, 999999})}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "prompt[1]");
}

// Prefix reuse: the next turn of a conversation extends the slot's history (prompt + answer).
TEST_F(Serve, NextTurnReusesTheSession) {
  start();
  const json first = chat(req(user("Hi"), {{"thinking", false}, {"strata_test_output", "Hello there"}}));
  EXPECT_EQ(first["choices"][0]["message"]["content"], "Hello there");
  const int64_t p1 = first["usage"]["prompt_tokens"];
  json msgs = user("Hi");
  msgs.push_back({{"role", "assistant"}, {"content", "Hello there"}});
  msgs.push_back({{"role", "user"}, {"content", "And then?"}});
  const json second = chat(req(msgs, {{"thinking", false}, {"max_tokens", 2}}));
  const tokenizer::Tokenizer* tok = &suite_tokenizer();
  const int64_t answer = static_cast<int64_t>(tok->encode("Hello there", false).size());
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], p1 + answer);
  EXPECT_EQ(second["usage"]["prompt_cache_hit_tokens"], p1 + answer);
  EXPECT_GT(metric("strata_prompt_tokens_cached_total"), 0);
  // A different conversation reuses only the template's opening tokens (BOS, the user tag), the
  // slot's session cut back to them (Session::rewind).
  const json other = chat(req(user("Something else"), {{"thinking", false}, {"max_tokens", 1}}));
  EXPECT_LT(other["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), p1);
}

// A request that shares a prefix with the slot's history but changes its tail (issue 17 item 4):
// the slot's session is rewound to the common prefix (Session::rewind, bit-exact), so the greedy
// answer equals that of a cold session. B runs first on the fresh server (cold), then A takes the
// slot (rewinding B's session), then B again (rewinding A's). No prefix cache: the reuse is the
// rewind's. The tiny model's window is 16 tokens, so 12-token prompts stay within the undo log.
TEST_F(Serve, ChangedTailRewindsTheSlotSessionExactly) {
  ServerOptions o;
  o.parallel = 1;
  o.prefix_cache_mib = 0;
  start(o);
  const std::vector<int32_t> a = {0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100};
  std::vector<int32_t> b(a.begin(), a.begin() + 8);
  for (int32_t t : {5000, 5100, 5200, 5300}) b.push_back(t);
  auto run = [&](const std::vector<int32_t>& prompt) {
    auto r = post("/v1/completions", {{"model", kModel}, {"prompt", prompt}, {"temperature", 0}, {"max_tokens", 6}});
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  };
  const json cold = run(b);
  EXPECT_EQ(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  run(a);
  const json warm = run(b);
  EXPECT_EQ(warm["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(warm["choices"][0]["text"], cold["choices"][0]["text"]);
  EXPECT_EQ(metric("strata_prefix_rewinds_total"), 2);  // A's admission and B's second
  // A prompt longer than the window: the engine runs its last window (16) positions in forwards of
  // at most the window, so they stay undoable; a prompt changing the tail after 30 of 40 tokens is
  // rewound. Below the floor (the log keeps about the last window of positions) it starts fresh.
  std::vector<int32_t> c, d, e;
  for (int32_t i = 0; i < 40; ++i) c.push_back(2000 + i);
  d.assign(c.begin(), c.begin() + 30);
  d.push_back(7);
  e.assign(c.begin(), c.begin() + 10);
  e.push_back(7);
  run(c);
  EXPECT_EQ(run(d)["usage"]["prompt_tokens_details"]["cached_tokens"], 30);
  EXPECT_EQ(metric("strata_prefix_rewinds_total"), 3);
  EXPECT_EQ(run(e)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(metric("strata_prefix_rewinds_total"), 3);
}

// With --slot-undo 0 the slot keeps no undo log: a changed tail starts fresh.
TEST_F(Serve, SlotUndoOffStartsAChangedTailFresh) {
  ServerOptions o;
  o.parallel = 1;
  o.prefix_cache_mib = 0;
  o.slot_undo = 0;
  start(o);
  auto run = [&](const std::vector<int32_t>& prompt) {
    auto r = post("/v1/completions", {{"model", kModel}, {"prompt", prompt}, {"temperature", 0}, {"max_tokens", 2}});
    EXPECT_TRUE(r);
    return r ? json::parse(r->body) : json();
  };
  run({0, 100, 200, 300, 400});
  EXPECT_EQ(run({0, 100, 200, 9, 9})["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(metric("strata_prefix_rewinds_total"), 0);
}

// When another conversation took the slot in between, the shared prefix cache (a snapshot taken at
// the end of the first turn) still saves the prefill of the earlier turn.
TEST_F(Serve, PrefixCacheAcrossConversations) {
  ServerOptions o;
  o.parallel = 1;
  start(o);
  const json first = chat(req(user("Hi"), {{"thinking", false}, {"strata_test_output", "Hello there"}}));
  const int64_t p1 = first["usage"]["prompt_tokens"];
  chat(req(user("A different conversation"), {{"thinking", false}, {"max_tokens", 1}}));
  json msgs = user("Hi");
  msgs.push_back({{"role", "assistant"}, {"content", "Hello there"}});
  msgs.push_back({{"role", "user"}, {"content", "Please tell me more about that, with all the details you have."}});
  const json third = chat(req(msgs, {{"thinking", false}, {"max_tokens", 1}}));
  const tokenizer::Tokenizer* tok = &suite_tokenizer();
  const int64_t answer = static_cast<int64_t>(tok->encode("Hello there", false).size());
  EXPECT_EQ(third["usage"]["prompt_tokens_details"]["cached_tokens"], p1 + answer);
  EXPECT_GE(metric("strata_prefix_cache_hits_total"), 1);
  EXPECT_GE(metric("strata_prefix_cache_entries"), 2);
}

TEST_F(Serve, OverloadedWhenQueueFull) {
  ServerOptions o;
  o.parallel = 1;
  o.max_queue = 0;
  start(o);
  RawConn busy(srv_->port());
  busy.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 100000}, {"stream", true}}).dump());
  busy.read_for(30000ms, "reasoning_content");
  ASSERT_EQ(wait_metric("strata_requests_running", 1), 1);
  const json j = chat(req(user("Hi"), {{"max_tokens", 1}}), 503);
  EXPECT_EQ(j["error"]["code"], "overloaded");
  EXPECT_EQ(j["error"]["type"], "server_error");
  busy.close();
  EXPECT_EQ(wait_metric("strata_requests_running", 0), 0);
  EXPECT_EQ(chat(req(user("Hi"), {{"max_tokens", 1}}))["object"], "chat.completion");
}

// A client that hangs up mid-stream cancels its generation and frees the slot.
TEST_F(Serve, DisconnectCancels) {
  start();
  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "stream" : "non-stream");
    const double before = metric("strata_generation_tokens_total");
    RawConn c(srv_->port());
    c.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 100000}, {"stream", stream}}).dump());
    ASSERT_EQ(wait_metric("strata_requests_running", 1), 1);
    // Close once it is decoding: a fixed sleep raced the prompt's prefill on a loaded machine
    // (ASan, 2 busy cores: no token within 100 ms).
    const auto end = std::chrono::steady_clock::now() + 30000ms;
    while (metric("strata_generation_tokens_total") == before && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(10ms);
    }
    c.close();
    EXPECT_EQ(wait_metric("strata_requests_running", 0), 0);
    const double generated = metric("strata_generation_tokens_total") - before;
    EXPECT_GT(generated, 0);
    EXPECT_LT(generated, 100000);
    // Nothing more is generated for it.
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(metric("strata_generation_tokens_total") - before, generated);
  }
  EXPECT_GE(metric("strata_kv_sessions"), 1);
  // The slot's KV cache is held, and counted, after its request ended.
  EXPECT_GT(metric("strata_kv_bytes"), 0);
}

// Stopping the server (SIGINT/SIGTERM in strata serve) ends running requests with a 503
// server_shutdown error, in a stream as its last event with the chunked body closed, not a cut.
TEST_F(Serve, StopEndsRunningRequestsWithAnError) {
  ServerOptions o;
  o.parallel = 2;
  start(o);
  RawConn streamed(srv_->port()), plain(srv_->port());
  streamed.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 100000}, {"stream", true}}).dump());
  plain.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 100000}}).dump());
  ASSERT_EQ(wait_metric("strata_requests_running", 2), 2);
  std::thread stopper([this] { srv_->stop(); });
  const std::string& s = streamed.read_for(30000ms, "0\r\n\r\n");
  const std::string& p = plain.read_for(30000ms, "server_shutdown");
  stopper.join();
  EXPECT_NE(s.find("data: {\"error\":"), std::string::npos) << s.substr(s.size() > 600 ? s.size() - 600 : 0);
  EXPECT_NE(s.find("\"code\":\"server_shutdown\""), std::string::npos);
  EXPECT_EQ(s.substr(s.size() - 5), "0\r\n\r\n") << "the chunked body is closed";
  EXPECT_EQ(p.rfind("HTTP/1.1 503", 0), 0u) << p;
  EXPECT_NE(p.find("\"code\":\"server_shutdown\""), std::string::npos) << p;
}

// While a stream waits in the queue, SSE comments keep it alive.
TEST_F(Serve, KeepAliveWhileQueued) {
  ServerOptions o;
  o.parallel = 1;
  o.keep_alive_s = 0.05;
  start(o);
  RawConn busy(srv_->port());
  busy.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 100000}, {"stream", true}}).dump());
  ASSERT_EQ(wait_metric("strata_requests_running", 1), 1);
  RawConn waiting(srv_->port());
  waiting.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 2}, {"stream", true}}).dump());
  // (The raw bytes are HTTP chunks: count the comments rather than expect them adjacent.)
  auto count = [](const std::string& s) {
    size_t n = 0;
    for (size_t p = s.find(": keep-alive\n\n"); p != std::string::npos; p = s.find(": keep-alive\n\n", p + 1)) ++n;
    return n;
  };
  const auto until = std::chrono::steady_clock::now() + 30000ms;
  while (count(waiting.read_for(50ms)) < 3 && std::chrono::steady_clock::now() < until) {
  }
  const std::string& got = waiting.read_for(0ms);
  EXPECT_NE(got.find("text/event-stream"), std::string::npos) << got;
  EXPECT_GE(count(got), 3u) << got;
  EXPECT_EQ(got.find("reasoning_content"), std::string::npos) << "no tokens while queued";
  EXPECT_EQ(metric("strata_requests_waiting"), 1);
  busy.close();
  const std::string& rest = waiting.read_for(30000ms, "[DONE]");
  EXPECT_NE(rest.find("data: [DONE]"), std::string::npos);
}

// A long prefill (here: one token per forward) sends SSE comments too, and only before the first
// token: after the role chunk, before any generated text.
TEST_F(Serve, KeepAliveDuringLongPrefill) {
  ServerOptions o;
  o.parallel = 1;
  o.keep_alive_s = 0.01;
  o.prefill_chunk = 1;
  start(o);
  std::string text;
  for (int i = 0; i < 400; ++i) text += "word ";
  RawConn c(srv_->port());
  c.post("/v1/chat/completions", req(user(text), {{"max_tokens", 2}, {"stream", true}, {"thinking", false},
                                                  {"strata_test_output", "ab"}}).dump());
  const std::string got = c.read_for(60000ms, "data: [DONE]");
  ASSERT_NE(got.find("data: [DONE]"), std::string::npos) << got;
  const size_t role = got.find("data: {");
  const size_t first_token = got.find("\"content\":\"a", role);
  ASSERT_NE(role, std::string::npos);
  ASSERT_NE(first_token, std::string::npos) << got;
  const size_t ka = got.find(": keep-alive\n\n", role);
  ASSERT_NE(ka, std::string::npos) << "no keep-alive during the prefill: " << got;
  EXPECT_LT(ka, first_token);
  EXPECT_EQ(got.find(": keep-alive\n\n", first_token), std::string::npos) << "keep-alive after the first token";
  EXPECT_EQ(metric("strata_requests_waiting"), 0);  // it was prefilling, not queued
}

// /health, /metrics and /v1/models do not wait behind generations: with every worker thread
// holding a stream (one generating, one queued), they are still answered at once.
TEST_F(Serve, CheapRoutesWhileEveryWorkerIsBusy) {
  ServerOptions o;
  o.parallel = 1;
  o.max_queue = 1;
  o.http_threads = 2;
  start(o);
  RawConn busy(srv_->port()), queued(srv_->port());
  busy.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 100000}, {"stream", true}}).dump());
  ASSERT_EQ(wait_metric("strata_requests_running", 1), 1);
  queued.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 2}, {"stream", true}}).dump());
  ASSERT_EQ(wait_metric("strata_requests_waiting", 1), 1);
  for (const char* path : {"/health", "/metrics", "/v1/models"}) {
    const auto t0 = std::chrono::steady_clock::now();
    RawConn c(srv_->port());
    c.send_raw(std::string("GET ") + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const std::string& got = c.read_for(5000ms, "\r\n\r\n");
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << path << ": " << got;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << path;
  }
  busy.close();
  EXPECT_NE(queued.read_for(30000ms, "data: [DONE]").find("data: [DONE]"), std::string::npos);
}

// A queued request whose client leaves gives its queue place back at once (it never takes a slot).
TEST_F(Serve, QueuedClientLeavingFreesItsPlace) {
  ServerOptions o;
  o.parallel = 1;
  o.max_queue = 1;
  start(o);
  RawConn busy(srv_->port());
  busy.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 100000}, {"stream", true}}).dump());
  ASSERT_EQ(wait_metric("strata_requests_running", 1), 1);
  {
    RawConn queued(srv_->port());
    queued.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 2}}).dump());
    ASSERT_EQ(wait_metric("strata_requests_waiting", 1), 1);
    EXPECT_EQ(chat(req(user("Hi"), {{"max_tokens", 1}}), 503)["error"]["code"], "overloaded");
  }  // hangs up
  EXPECT_EQ(wait_metric("strata_requests_waiting", 0), 0);
  EXPECT_EQ(metric("strata_requests_running"), 1);  // the busy stream still runs
  RawConn next(srv_->port());
  next.post("/v1/chat/completions", req(user("Hi"), {{"max_tokens", 2}, {"stream", true}}).dump());
  EXPECT_EQ(wait_metric("strata_requests_waiting", 1), 1);  // queued, not refused
  busy.close();
  EXPECT_NE(next.read_for(30000ms, "data: [DONE]").find("data: [DONE]"), std::string::npos);
}

TEST_F(Serve, TwoConcurrentStreams) {
  ServerOptions o;
  o.parallel = 2;
  start(o);
  Sse a, b;
  std::thread ta([&] { a = chat_stream(req(user("one"), {{"max_tokens", 20}, {"thinking", false}})); });
  std::thread tb([&] { b = chat_stream(req(user("two"), {{"max_tokens", 20}, {"thinking", false}})); });
  ta.join();
  tb.join();
  EXPECT_TRUE(a.done);
  EXPECT_TRUE(b.done);
  EXPECT_NE(a.events.front()["id"], b.events.front()["id"]);
}

TEST_F(Serve, Metrics) {
  start();
  chat(req(user("Hi"), {{"max_tokens", 2}}));
  auto c = client();
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  for (const char* m : {"strata_requests_total{status=\"200\"}", "strata_prompt_tokens_total",
                        "strata_prompt_tokens_cached_total", "strata_generation_tokens_total",
                        "strata_reasoning_tokens_total", "strata_requests_running", "strata_requests_waiting",
                        "strata_kv_sessions", "strata_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
                        "strata_inter_token_latency_seconds_count", "strata_request_duration_seconds_sum",
                        "strata_batch_size_bucket{le=\"1\"}", "strata_step_tokens_bucket{le=\"+Inf\"}",
                        "strata_engine_steps_total", "strata_spec_cycles_total 0", "strata_spec_drafted_total 0",
                        "strata_spec_accepted_total 0", "strata_spec_guard_pauses_total 0",
                        "strata_kv_bytes"})
    EXPECT_NE(r->body.find(m), std::string::npos) << m;
  EXPECT_EQ(metric("strata_generation_tokens_total"), 2);
  // One request: its prompt in three chunks (the slot keeps undo records for its last window of
  // 16 positions, so a chunk reaching into them longer than the window is cut where they begin;
  // then where the assistant prefix begins, a prefix-cache snapshot point), then one decode step
  // (the first token comes from the prompt's logits).
  EXPECT_EQ(wait_metric("strata_engine_steps_total", 4), 4);
  const std::string m = scrape();
  EXPECT_EQ(metric_in(m, "strata_batch_size_count"), metric_in(m, "strata_engine_steps_total"));
  EXPECT_EQ(metric_in(m, "strata_step_tokens_count"), 4);
  EXPECT_EQ(metric_in(m, "strata_batch_size_bucket{le=\"1\"}"), 4);
}

// Continuous batching (issue 14 item 5): greedy answers of concurrent requests equal their answers
// alone, with prompt chunks joining other slots' decode steps (one prompt token per step here, so
// the four prompts are still prefilling when the others arrive). No prefix cache: every request
// prefills from scratch, alone and batched alike.
TEST_F(Serve, ConcurrentGreedyRequestsEqualTheirAnswersAlone) {
  ServerOptions o;
  o.parallel = 4;
  o.prefill_chunk = 4;
  o.batch_tokens = 6;
  o.prefix_cache_mib = 0;
  start(o);
  const std::vector<std::string> prompts = {"Once upon a time there was a dragon who", "Hi",
                                            "List three colours of the rainbow, please, in order of their wavelength",
                                            "The quick brown fox"};
  auto body = [&](size_t i) {
    return json{{"model", kModel}, {"prompt", prompts[i]}, {"temperature", 0}, {"max_tokens", 8 + 4 * static_cast<int>(i)}};
  };
  std::vector<std::string> alone(prompts.size()), together(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto r = post("/v1/completions", body(i));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    alone[i] = json::parse(r->body)["choices"][0]["text"];
  }
  // Alone: every step a batch of one.
  {
    const std::string m = scrape();
    EXPECT_EQ(metric_in(m, "strata_batch_size_bucket{le=\"1\"}"), metric_in(m, "strata_batch_size_count"));
  }
  std::vector<std::thread> ts;
  for (size_t i = 0; i < prompts.size(); ++i)
    ts.emplace_back([&, i] {
      auto r = post("/v1/completions", body(i));
      if (r && r->status == 200) together[i] = json::parse(r->body)["choices"][0]["text"];
    });
  for (std::thread& t : ts) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "request " << i;
  // Some step ran several requests at once (the batch-size histogram has steps above 1).
  const std::string m = scrape();
  EXPECT_GT(metric_in(m, "strata_batch_size_count") - metric_in(m, "strata_batch_size_bucket{le=\"1\"}"), 0);
}

// Prefix reuse for agent flows (issue 14 item 6): the client re-renders the first turn without its
// reasoning_content, so neither the live session nor the end-of-prompt snapshot is a prefix of the
// next prompt; the snapshot taken where the first turn's assistant prefix began still is.
TEST_F(Serve, ReRenderedHistoryReusesTheGenerationSuffixSnapshot) {
  ServerOptions o;
  o.parallel = 1;
  start(o);
  const json first = chat(req(user("What is the capital of France?"),
                              {{"thinking", true}, {"strata_test_output", "Let me recall.</think>Paris."}}));
  EXPECT_EQ(first["choices"][0]["message"]["content"], "Paris.");
  const int64_t p1 = first["usage"]["prompt_tokens"];
  json msgs = user("What is the capital of France?");
  msgs.push_back({{"role", "assistant"}, {"content", "Paris."}});  // reasoning_content dropped
  msgs.push_back({{"role", "user"}, {"content", "And which river flows through it, and where does that river rise?"}});
  const json second = chat(req(msgs, {{"thinking", true}, {"max_tokens", 1}}));
  const int64_t cached = second["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, 0);
  EXPECT_LT(cached, p1);  // the first prompt up to its assistant prefix
  EXPECT_GE(cached, p1 - 3);
  // A short follow-up (a few new tokens) reuses it as well: no minimum remainder.
  const json colour = chat(req(user("Name a colour."), {{"thinking", true}, {"strata_test_output", "Hmm.</think>Red."}}));
  const int64_t p3 = colour["usage"]["prompt_tokens"];
  json m3 = user("Name a colour.");
  m3.push_back({{"role", "assistant"}, {"content", "Red."}});
  m3.push_back({{"role", "user"}, {"content", "More?"}});
  const json more = chat(req(m3, {{"thinking", true}, {"max_tokens", 1}}));
  EXPECT_GE(more["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), p3 - 3);
}

}  // namespace
}  // namespace strata::server
