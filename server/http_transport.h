// HttpTransport: the server's HTTP/1.1 connections on Boost.Beast, every resource bounded per
// connection (issue 13). One Asio I/O thread does all socket reading asynchronously, so a slow or
// idle client holds a few KiB and a timer, never a thread:
//   accept      over --max-connections open connections: 503 + Connection: close at once
//   head        at most --header-limit-kib bytes (431) and HeadPolicy::max_header_fields fields
//               (431), complete within --header-timeout-s of the first byte however slowly it
//               trickles (408, then close)
//   checks      check_request_head (server/request_head.h) before any body byte is read
//   body        at most --body-limit (413), within --body-timeout-s (408)
//   keep-alive  an idle connection is a pending wait of --keepalive-timeout-s, then closed
// Only then is the complete request handed to `dispatch` (on the I/O thread; it must not block).
// The answer comes back through Exchange::respond from any thread: a whole body is written by the
// I/O thread (with --write-timeout), a stream by the caller's thread while nothing else touches the
// socket. A response given before the body was read ends the connection with a lingering close
// (server/lingering_close.h), so no part of that body is parsed as a next request.
// Thread safety: start/stop from one owner thread; respond from any thread, once per request.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/http_response.h"
#include "server/request_head.h"

namespace strata::server {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 0;                                            // 0 = any free port
  int max_connections = 512;                               // open connections before 503
  int64_t header_limit_bytes = 64 << 10;                   // request line + headers
  std::chrono::milliseconds header_timeout{10000};         // whole head, from its first byte
  std::chrono::milliseconds keep_alive_timeout{5000};      // idle between requests
  std::chrono::milliseconds body_timeout{60000};           // whole body, after the head
  // Bytes all connections together may hold in request bodies being received (declared length, or
  // the body limit for a chunked body, reserved when the head is accepted): past it a new body gets
  // 503 before it is read. Bounds stalled uploads: 512 connections x 64 MiB would be 32 GiB.
  int64_t body_memory_limit_bytes = int64_t{1} << 30;
  std::chrono::milliseconds write_timeout{30000};          // one response (or one stream write)
  int max_requests_per_connection = 1000;
  HeadPolicy policy;
};

// A complete request: head checked, body read.
struct Request {
  std::string method;
  std::string target;  // as sent
  std::string path;    // target before '?'
  std::string body;
  std::string remote;  // client address, for the log
  // The connection's socket, for peer_closed() while the request is handled; valid until respond().
  int fd = -1;
};

// One request's way back to its client.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // Gives the response; call exactly once, from any thread. A streaming response (Response::stream)
  // is written on the calling thread, which blocks until the stream ends: never call it with one
  // on the I/O thread.
  virtual void respond(Response r) = 0;
};

class HttpTransport {
 public:
  // Every complete request, on the I/O thread. Must not block: answer cheap requests at once and
  // hand the others to worker threads.
  using Dispatch = std::function<void(Request, std::shared_ptr<Exchange>)>;
  // Called just before each response is written (metrics, log), on the thread that writes it. The
  // request has no body here; for answers given before the head could be parsed, method and path
  // are empty.
  using Answered = std::function<void(const Request&, int status)>;

  HttpTransport(TransportOptions options, Dispatch dispatch, Answered answered);
  ~HttpTransport();  // stop()
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds host:port (SO_REUSEADDR, not SO_REUSEPORT: a second server on the port fails) and starts
  // the I/O thread. kIOError naming host:port when the address cannot be bound.
  [[nodiscard]] Status start();
  int port() const;
  // Open connections (accepted, not yet closed; lingering closes not counted).
  int open_connections() const;

  // Stops accepting and closes idle connections; connections with a request in progress are closed
  // after its response. Returns at once.
  void stop_accepting();
  // Waits (at most `grace`) for the responses still being written, then closes everything and
  // joins the I/O thread. Call after every Exchange has been answered. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(3000));

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace strata::server
