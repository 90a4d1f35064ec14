// The per-connection bounds of the HTTP layer (server/http_transport.h; issue 13), over loopback
// against a server with no model attached (every route still answers: /health 503 model_loading,
// generations 503 from a worker): slow headers do not starve /health, a header flood does not grow
// memory, the connection cap answers 503, the head deadline answers 408, a POST without a length is
// answered at once, and idle keep-alive connections hold no worker.
// Every loop is bounded in count and time; only 127.0.0.1 is contacted.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/http_server.h"

namespace strata::server {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// A raw loopback connection (non-blocking).
class Conn {
 public:
  explicit Conn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  bool connected() const { return ok_; }
  int fd() const { return fd_; }
  // Sends what the socket takes now; false on an error (reset, closed).
  bool send_some(const std::string& bytes, size_t* sent) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    *sent = static_cast<size_t>(n);
    return true;
  }
  bool send_all(const std::string& bytes, std::chrono::milliseconds d = 2000ms) {
    const auto end = steady::now() + d;
    size_t off = 0;
    while (off < bytes.size() && steady::now() < end) {
      size_t n = 0;
      if (!send_some(bytes.substr(off), &n)) return false;
      off += n;
      if (n == 0) {
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, 10);
      }
    }
    return off == bytes.size();
  }
  // Reads for at most `d`, or until `until` has appeared or the server closed; returns all read.
  const std::string& read_for(std::chrono::milliseconds d, const std::string& until = "") {
    const auto end = steady::now() + d;
    while (!closed_ && steady::now() < end) {
      if (!until.empty() && got_.find(until) != std::string::npos) break;
      read_now(10);
    }
    return got_;
  }
  // One poll of at most `ms` and what it brings.
  void read_now(int ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return;
    char buf[8192];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      got_.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
      closed_ = true;
    }
  }
  const std::string& got() const { return got_; }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  bool closed_ = false;
  std::string got_;
};

// Resident memory of this process in bytes (the server runs in it).
int64_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// One GET /health on a fresh connection: the seconds until the whole answer came (-1: none in 5 s).
double probe_health(int port) {
  const auto t0 = steady::now();
  Conn c(port);
  if (!c.send_all("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) return -1;
  const std::string& got = c.read_for(5000ms, "}");
  if (got.rfind("HTTP/1.1 ", 0) != 0 || got.find('}') == std::string::npos) return -1;
  return std::chrono::duration<double>(steady::now() - t0).count();
}

class HttpLimits : public ::testing::Test {
 protected:
  HttpServer& start(ServerOptions o = {}) {
    o.port = 0;
    srv_ = std::make_unique<HttpServer>(o, nullptr);
    const Status s = srv_->start();
    EXPECT_TRUE(s.ok()) << s.to_string();
    return *srv_;
  }
  void TearDown() override {
    if (srv_) srv_->stop();
  }
  int port() const { return srv_->port(); }
  std::unique_ptr<HttpServer> srv_;
};

// (a) 200 connections trickle header bytes (one byte per connection every 100 ms, never finishing
// a head within the test): /health still answers every probe within 2 s. (cpp-httplib 0.11 gave
// each a pool thread: ~80 made /health unanswerable.)
TEST_F(HttpLimits, SlowHeadersDoNotStarveHealth) {
  start();
  std::vector<std::unique_ptr<Conn>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(std::make_unique<Conn>(port()));
    ASSERT_TRUE(slow.back()->connected()) << i;
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    const std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(200, 'a');
    for (size_t i = 0; i < head.size() && !done.load(); ++i) {
      for (auto& c : slow) {
        size_t n = 0;
        c->send_some(head.substr(i, 1), &n);
      }
      std::this_thread::sleep_for(100ms);
    }
  });
  std::this_thread::sleep_for(500ms);  // every slow connection has started its head
  double worst = 0;
  int probes = 0;
  const auto end = steady::now() + 4s;
  while (steady::now() < end && probes < 40) {
    const double s = probe_health(port());
    ++probes;
    EXPECT_GE(s, 0) << "probe " << probes << " got no answer";
    worst = std::max(worst, s);
    std::this_thread::sleep_for(100ms);
  }
  done = true;
  trickle.join();
  EXPECT_GE(probes, 5);
  EXPECT_LT(worst, 2.0) << "slowest /health probe under 200 slow connections";
  RecordProperty("worst_health_probe_ms", static_cast<int>(worst * 1000));
  std::printf("slowloris: %d probes, worst /health %.1f ms with 200 trickling connections\n", probes, worst * 1000);
}

// (b) 6 clients send up to 200 MB of headers each: each is answered 431 (or closed) as soon as the
// head passes the limit, and resident memory rises by less than 200 MB. (cpp-httplib 0.11 buffered
// them: 230 MB over 6 connections took RSS from 1.06 to 3.8 GB.)
TEST_F(HttpLimits, HeaderFloodIsBounded) {
  start();
  const int64_t before = rss_bytes();
  std::atomic<int64_t> peak{before};
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling.load()) {
      peak = std::max(peak.load(), rss_bytes());
      std::this_thread::sleep_for(20ms);
    }
  });
  struct Outcome {
    std::string answer;
    int64_t sent = 0;
    double seconds = 0;
    bool closed = false;
  };
  std::vector<Outcome> out(6);
  std::vector<std::thread> clients;
  for (int k = 0; k < 6; ++k)
    clients.emplace_back([&, k] {
      const auto t0 = steady::now();
      Conn c(port());
      c.send_all("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n");
      std::string block;
      for (int i = 0; block.size() < (1 << 20); ++i) block += "X-Flood-" + std::to_string(i) + ": " + std::string(1000, 'f') + "\r\n";
      const auto end = t0 + 20s;
      size_t off = 0;
      while (out[k].sent < 200'000'000 && steady::now() < end && c.got().empty() && !c.closed()) {
        size_t n = 0;
        if (!c.send_some(block.substr(off, 65536), &n)) break;  // reset: the server is done with us
        out[k].sent += static_cast<int64_t>(n);
        off = (off + n) % block.size();
        c.read_now(n == 0 ? 5 : 0);  // a client that reads its answer stops at the 431
      }
      c.read_for(5000ms, "}");
      out[k].answer = c.got();
      out[k].closed = c.closed();
      out[k].seconds = std::chrono::duration<double>(steady::now() - t0).count();
    });
  for (auto& t : clients) t.join();
  std::this_thread::sleep_for(200ms);
  sampling = false;
  sampler.join();
  const int64_t rise = peak.load() - before;
  for (const Outcome& o : out) {
    EXPECT_TRUE(o.answer.rfind("HTTP/1.1 431", 0) == 0 || (o.answer.empty() && o.closed)) << o.answer.substr(0, 200);
    EXPECT_LT(o.seconds, 10.0);
    EXPECT_LT(o.sent, 200'000'000) << "the server read 200 MB of headers";
  }
  EXPECT_LT(rise, 200ll << 20) << "RSS rose by " << (rise >> 20) << " MiB";
  std::printf("header flood: 6 clients, sent %lld..%lld KiB each before the answer, RSS rise %lld KiB\n",
              static_cast<long long>(std::min_element(out.begin(), out.end(), [](auto& a, auto& b) { return a.sent < b.sent; })->sent >> 10),
              static_cast<long long>(std::max_element(out.begin(), out.end(), [](auto& a, auto& b) { return a.sent < b.sent; })->sent >> 10),
              static_cast<long long>(rise >> 10));
}

// Too many header fields (each small, all under the byte limit): 431.
TEST_F(HttpLimits, TooManyHeaderFields) {
  ServerOptions o;
  o.max_header_fields = 20;
  start(o);
  std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 30; ++i) head += "X-F" + std::to_string(i) + ": 1\r\n";
  Conn c(port());
  ASSERT_TRUE(c.send_all(head + "\r\n"));
  const std::string& got = c.read_for(2000ms, "}}");
  EXPECT_EQ(got.rfind("HTTP/1.1 431", 0), 0u) << got;
  EXPECT_NE(got.find("request_header_fields_too_large"), std::string::npos) << got;
}

// (c) The connection over the cap is answered 503 at once and closed; one freed place serves again.
TEST_F(HttpLimits, ConnectionCapAnswers503) {
  ServerOptions o;
  o.max_connections = 4;
  start(o);
  std::vector<std::unique_ptr<Conn>> held;
  for (int i = 0; i < 4; ++i) held.push_back(std::make_unique<Conn>(port()));
  std::this_thread::sleep_for(200ms);  // all four accepted
  const auto t0 = steady::now();
  Conn over(port());
  over.send_all("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  const std::string& got = over.read_for(2000ms, "}}");
  const double s = std::chrono::duration<double>(steady::now() - t0).count();
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_NE(got.find("\"code\":\"overloaded\""), std::string::npos) << got;
  EXPECT_LT(s, 1.0);
  over.read_for(2000ms);
  EXPECT_TRUE(over.closed());
  held.pop_back();  // one place free again
  std::this_thread::sleep_for(200ms);
  EXPECT_GE(probe_health(port()), 0);
}

// (d) A head that trickles forever is answered 408 once the head deadline passes, and closed.
TEST_F(HttpLimits, HeaderDeadlineAnswers408) {
  ServerOptions o;
  o.header_timeout_s = 0.5;
  start(o);
  Conn c(port());
  const auto t0 = steady::now();
  const std::string head = "GET /health HTTP/1.1\r\nX-Slow: " + std::string(100, 'a');
  for (size_t i = 0; i < head.size() && !c.closed() && c.got().empty(); ++i) {
    size_t n = 0;
    c.send_some(head.substr(i, 1), &n);
    c.read_now(50);
  }
  const std::string& got = c.read_for(3000ms);
  const double s = std::chrono::duration<double>(steady::now() - t0).count();
  EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
  EXPECT_NE(got.find("request_timeout"), std::string::npos) << got;
  EXPECT_TRUE(c.closed());
  EXPECT_GT(s, 0.4);
  EXPECT_LT(s, 3.0);
}

// A connection that never sends a byte is closed after the head deadline too: it never holds its
// place (and a few KiB) forever.
TEST_F(HttpLimits, SilentConnectionIsClosed) {
  ServerOptions o;
  o.header_timeout_s = 0.3;
  start(o);
  Conn c(port());
  c.read_for(3000ms);
  EXPECT_TRUE(c.closed());
}

// (e) POST/PUT/PATCH without Content-Length or Transfer-Encoding have an empty body (RFC 9112 6.3):
// answered at once (405 on known paths, 404 elsewhere), and the connection goes on.
TEST_F(HttpLimits, NoLengthIsAnsweredAtOnce) {
  start();
  struct Case {
    const char* path;
    const char* status;
  };
  for (const char* method : {"POST", "PUT", "PATCH"})
    for (const Case& k : {Case{"/health", "HTTP/1.1 405"}, Case{"/v1/models", "HTTP/1.1 405"},
                          Case{"/metrics", "HTTP/1.1 405"}, Case{"/nope", "HTTP/1.1 404"}}) {
      const auto t0 = steady::now();
      Conn c(port());
      c.send_all(std::string(method) + " " + k.path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
      const std::string& got = c.read_for(3000ms, "}}");
      const double s = std::chrono::duration<double>(steady::now() - t0).count();
      EXPECT_EQ(got.rfind(k.status, 0), 0u) << method << " " << k.path << ": " << got;
      EXPECT_LT(s, 1.0) << method << " " << k.path;
      EXPECT_FALSE(c.closed());
    }
}

// (f) Idle keep-alive connections hold no worker: with 2 workers, 12 connections that each had a
// generation request answered (on a worker) and now sit idle, a new generation request is still
// answered at once. (cpp-httplib kept a pool thread per keep-alive connection.)
TEST_F(HttpLimits, IdleKeepAliveHoldsNoWorker) {
  ServerOptions o;
  o.http_threads = 2;
  start(o);
  const std::string post = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: 2\r\n\r\n{}";
  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 12; ++i) {
    idle.push_back(std::make_unique<Conn>(port()));
    const auto t0 = steady::now();
    ASSERT_TRUE(idle.back()->send_all(post));
    const std::string& got = idle.back()->read_for(3000ms, "}}");
    EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << i << ": " << got;  // model_loading, from a worker
    EXPECT_NE(got.find("model_loading"), std::string::npos) << got;
    EXPECT_LT(std::chrono::duration<double>(steady::now() - t0).count(), 2.0) << "request " << i;
    EXPECT_FALSE(idle.back()->closed());
  }
  const auto t0 = steady::now();
  Conn fresh(port());
  fresh.send_all(post);
  EXPECT_NE(fresh.read_for(3000ms, "}}").find("model_loading"), std::string::npos) << fresh.got();
  EXPECT_LT(std::chrono::duration<double>(steady::now() - t0).count(), 2.0);
  // And the idle ones still carry a next request.
  ASSERT_TRUE(idle[0]->send_all("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  EXPECT_NE(idle[0]->read_for(3000ms, "the model is loading\"").find("HTTP/1.1 503", 10), std::string::npos)
      << idle[0]->got();
}

// A body that does not arrive within the body deadline: 408, and the connection ends.
TEST_F(HttpLimits, BodyDeadlineAnswers408) {
  ServerOptions o;
  o.body_timeout_s = 0.5;
  start(o);
  Conn c(port());
  const auto t0 = steady::now();
  ASSERT_TRUE(c.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n{\""));
  const std::string& got = c.read_for(3000ms, "}}");
  EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
  EXPECT_LT(std::chrono::duration<double>(steady::now() - t0).count(), 2.5);
  c.read_for(2000ms);
  EXPECT_TRUE(c.closed());
}

// Stalled uploads cannot add up past --body-memory-mib (found by the break-in review: ten clients
// each stalling a 63 MB body held 630 MB; 512 could hold 32 GiB): the body that would pass the
// budget gets 503 before it is read, and a finished or abandoned body gives its share back.
TEST_F(HttpLimits, StalledBodiesShareOneMemoryBudget) {
  ServerOptions o;
  o.body_limit_bytes = 1 << 20;
  o.body_memory_mib = 2;
  start(o);
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1048576\r\n\r\n";
  auto a = std::make_unique<Conn>(port());
  auto b = std::make_unique<Conn>(port());
  ASSERT_TRUE(a->send_all(head + "{\"messages\":"));
  ASSERT_TRUE(b->send_all(head + "{\"messages\":"));
  a->read_for(300ms);  // both heads accepted: 2 MiB reserved, nothing answered
  EXPECT_EQ(a->got(), "");
  EXPECT_EQ(b->got(), "");
  Conn c(port());
  ASSERT_TRUE(c.send_all(head + "{"));
  const std::string& got = c.read_for(2000ms, "}}");
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
  EXPECT_NE(got.find("overloaded"), std::string::npos) << got;
  // One stalled client leaves: its share is free again, and a small body is served.
  a.reset();
  std::this_thread::sleep_for(200ms);
  Conn d(port());
  ASSERT_TRUE(d.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"));
  const std::string& got_d = d.read_for(3000ms, "}}");
  EXPECT_EQ(got_d.rfind("HTTP/1.1 503", 0), 0u) << got_d;  // the model is not loaded: 503 model_loading
  EXPECT_NE(got_d.find("model_loading"), std::string::npos) << got_d;
}

// An idle keep-alive connection is closed after --keepalive-timeout-s.
TEST_F(HttpLimits, IdleKeepAliveIsClosed) {
  ServerOptions o;
  o.keepalive_timeout_s = 0.3;
  start(o);
  Conn c(port());
  ASSERT_TRUE(c.send_all("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  EXPECT_EQ(c.read_for(2000ms, "}}").rfind("HTTP/1.1 503", 0), 0u) << c.got();
  EXPECT_FALSE(c.closed());
  const auto t0 = steady::now();
  c.read_for(3000ms);
  EXPECT_TRUE(c.closed());
  EXPECT_LT(std::chrono::duration<double>(steady::now() - t0).count(), 2.0);
}

// "Expect: 100-continue" on an acceptable head: the invitation, then the body is read and served.
TEST_F(HttpLimits, ExpectContinueInvitesTheBody) {
  start();
  Conn c(port());
  ASSERT_TRUE(c.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
                         "Expect: 100-continue\r\n\r\n"));
  EXPECT_EQ(c.read_for(2000ms, "\r\n\r\n").rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << c.got();
  ASSERT_TRUE(c.send_all("{}"));
  EXPECT_NE(c.read_for(3000ms, "}}").find("HTTP/1.1 503", 10), std::string::npos) << c.got();  // model_loading
}

// Limits are validated and named by their flag.
TEST(HttpLimitOptions, Validated) {
  ServerOptions o;
  o.max_connections = 0;
  EXPECT_NE(o.validate().message().find("--max-connections"), std::string::npos);
  o = {};
  o.header_limit_kib = 0;
  EXPECT_NE(o.validate().message().find("--header-limit-kib"), std::string::npos);
  o = {};
  o.header_timeout_s = 0;
  EXPECT_NE(o.validate().message().find("--header-timeout-s"), std::string::npos);
  o = {};
  o.body_memory_mib = 0;
  EXPECT_NE(o.validate().message().find("--body-memory-mib"), std::string::npos);
  o = {};
  EXPECT_TRUE(o.validate().ok());
}

}  // namespace
}  // namespace strata::server
