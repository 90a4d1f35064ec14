// LingeringCloser: the connection gets FIN after what was written, the caller's descriptor reads end
// of file at once, and what the client still sends is dropped in the background until it closes.
#include "server/lingering_close.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace strata::server {
namespace {

// A connected TCP pair on the loopback: {server side, client side}.
std::pair<int, int> tcp_pair() {
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(l, 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  const int c = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const int s = ::accept(l, nullptr, nullptr);
  ::close(l);
  return {s, c};
}

// Everything the peer sends until end of file (or 10 s).
std::string read_to_eof(int fd) {
  std::string out;
  char buf[4096];
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

TEST(LingeringCloser, ResponseThenEndOfFileWhileTheClientStillSends) {
  LingeringCloser closer;
  auto [server, client] = tcp_pair();
  // The client sent a request with a body the server did not read.
  const std::string body(100000, 'b');
  ASSERT_EQ(::send(client, body.data(), body.size(), MSG_NOSIGNAL), static_cast<ssize_t>(body.size()));
  const std::string response = "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(server, response.data(), response.size(), MSG_NOSIGNAL), static_cast<ssize_t>(response.size()));
  closer.hand_over(server);  // returns at once: nothing here waits for the client
  // The caller's descriptor reads end of file now, though the body is still queued behind it.
  char b;
  EXPECT_EQ(::recv(server, &b, 1, MSG_DONTWAIT), 0);
  EXPECT_EQ(closer.draining(), 1);
  // The client gets the whole response, then FIN; what it still sends is dropped, not refused.
  EXPECT_EQ(read_to_eof(client), response);
  EXPECT_EQ(::send(client, body.data(), body.size(), MSG_NOSIGNAL), static_cast<ssize_t>(body.size()));
  ::close(client);
  for (int i = 0; i < 100 && closer.draining() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(closer.draining(), 0) << "the connection closed by the client is released";
  ::close(server);
}

TEST(LingeringCloser, DestructionClosesWhatIsStillDraining) {
  auto [server, client] = tcp_pair();
  {
    LingeringCloser closer;
    closer.hand_over(server);
    EXPECT_EQ(closer.draining(), 1);
  }
  // The server side is closed, not just half-closed: the client's writes end in a reset.
  EXPECT_EQ(read_to_eof(client), "");
  ssize_t sent = 1;
  for (int i = 0; i < 50 && sent > 0; ++i) {
    sent = ::send(client, "x", 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_LT(sent, 0) << "the connection is still open";
  ::close(client);
  ::close(server);
  LingeringCloser().hand_over(-1);  // no-op
}

}  // namespace
}  // namespace strata::server
