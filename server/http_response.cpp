#include "server/http_response.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/beast/http/status.hpp>
#include <cerrno>
#include <cstdio>

namespace strata::server {

Response error_response(const ApiError& e, ErrorDialect dialect) {
  Response r;
  r.status = e.status;
  r.body = dialect == ErrorDialect::kAnthropic ? e.to_anthropic_json() : e.to_json();
  return r;
}

std::string response_head(const Response& r, int64_t content_length, bool close) {
  const auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(r.status));
  std::string h = "HTTP/1.1 " + std::to_string(r.status) + " " + std::string(reason.data(), reason.size()) + "\r\n";
  if (!r.content_type.empty()) h += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [k, v] : r.headers) h += k + ": " + v + "\r\n";
  if (r.status != 204)  // a 204 has no body and no Content-Length (RFC 9110 §8.6)
    h += content_length < 0 ? std::string("Transfer-Encoding: chunked\r\n")
                            : "Content-Length: " + std::to_string(content_length) + "\r\n";
  h += close ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
  return h;
}

std::string chunk(std::string_view data) {
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size, static_cast<size_t>(n));
  out.append(data);
  out += "\r\n";
  return out;
}

bool write_all(int fd, std::string_view data, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) < 0 && errno != EINTR) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
  }
  return true;
}

}  // namespace strata::server
