#include "server/http_transport.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "server/lingering_close.h"

namespace strata::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

class Connection;

// Errors of Beast's HTTP parser (a malformed request), as opposed to socket errors.
bool is_http_error(error_code ec) { return ec && ec.category() == http::make_error_code(http::error::end_of_stream).category(); }

// The connection's read buffer: a flat_buffer that, while `recording`, keeps a copy of what the
// parser consumes. Beast consumes the start line and fields before it checks a framing field, so on
// a refused head this copy is the only place the whole head still exists (parse_head_leniently
// reads it to say what was wrong). Bounded by the header limit: only the head is recorded.
class HeadBuffer {
 public:
  using const_buffers_type = beast::flat_buffer::const_buffers_type;
  using mutable_buffers_type = beast::flat_buffer::mutable_buffers_type;
  explicit HeadBuffer(size_t max) : b_(max) {}
  size_t size() const { return b_.size(); }
  size_t max_size() const { return b_.max_size(); }
  size_t capacity() const { return b_.capacity(); }
  const_buffers_type data() const { return b_.data(); }
  mutable_buffers_type prepare(size_t n) { return b_.prepare(n); }
  void commit(size_t n) { b_.commit(n); }
  void consume(size_t n) {
    if (recording) {
      const auto d = b_.data();
      consumed.append(static_cast<const char*>(d.data()), std::min(n, d.size()));
    }
    b_.consume(n);
  }
  void clear() { b_.clear(); }
  // The bytes of the head so far: what was consumed, then what is still buffered.
  std::string head_bytes() const {
    const auto d = b_.data();
    return consumed + std::string(static_cast<const char*>(d.data()), d.size());
  }

  bool recording = false;
  std::string consumed;

 private:
  beast::flat_buffer b_;
};

std::string seconds_text(std::chrono::milliseconds d) {
  const double s = static_cast<double>(d.count()) / 1000.0;
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

}  // namespace

struct HttpTransport::Impl {
  // Members used by connections come first: the io_context (declared after them) is destroyed
  // first, and with it the handlers that still hold connections.
  TransportOptions opt;
  Dispatch dispatch;
  Answered answered;
  LingeringCloser closer;
  std::atomic<int> open{0};
  std::atomic<int64_t> body_bytes{0};  // reserved by bodies being received (opt.body_memory_limit_bytes)
  std::atomic<bool> stopping{false};
  int port = 0;
  // Every open connection, for stop_accepting (only weak references: connections own themselves).
  std::mutex live_mu;
  std::map<const Connection*, std::weak_ptr<Connection>> live;
  std::promise<void> ran;  // set when the I/O thread returns
  std::thread thread;
  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};

  void accept();
  void reject(tcp::socket sock);
};

namespace {

// One TCP connection: a state machine on the I/O thread (wait, head, checks, body, dispatch,
// response, again). Owned by shared_ptrs held by its pending operations and by the Exchange in a
// worker's hands; closed when the last one drops.
class Connection : public std::enable_shared_from_this<Connection>, public Exchange {
 public:
  Connection(HttpTransport::Impl& t, tcp::socket sock)
      : t_(t),
        sock_(std::move(sock)),
        buf_(static_cast<size_t>(t.opt.header_limit_bytes) + 65536),
        timer_(t.io),
        fd_(sock_.native_handle()) {
    ++t_.open;
    error_code ec;
    const auto ep = sock_.remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string();
  }
  ~Connection() override {
    release_body();
    {
      std::lock_guard<std::mutex> l(t_.live_mu);
      t_.live.erase(this);
    }
    --t_.open;
  }

  void start() {
    {
      std::lock_guard<std::mutex> l(t_.live_mu);
      t_.live[this] = weak_from_this();
    }
    read_head();
  }

  // stop_accepting: a connection waiting for a request closes now; one with a request in progress
  // closes after its response (respond sees `stopping`). I/O thread.
  void close_if_idle() {
    if (reading_) close_now();
  }

  void respond(Response r) override {
    const bool close = r.close || client_close_ || t_.stopping.load() || served_ + 1 >= t_.opt.max_requests_per_connection;
    if (t_.answered) t_.answered(request_, r.status);
    if (r.stream) {
      // The caller's (worker) thread writes the stream: no operation is pending on the socket
      // until the post below hands it back to the I/O thread.
      r.headers.emplace_back("Cache-Control", "no-cache");
      StreamSink sink(fd_, t_.opt.write_timeout);
      bool ended = write_all(fd_, response_head(r, -1, close), t_.opt.write_timeout);
      if (ended) ended = r.stream(sink) && sink.ok;
      asio::post(t_.io, [self = shared_from_this(), close, ended] { self->after_response(close || !ended, false); });
      return;
    }
    auto bytes = std::make_shared<std::string>(response_head(r, static_cast<int64_t>(r.body.size()), close));
    if (request_.method != "HEAD") bytes->append(r.body);  // HEAD: GET's head, no body (RFC 9110 §9.3.2)
    asio::post(t_.io, [self = shared_from_this(), bytes, close] { self->write(bytes, close, false); });
  }

 private:
  struct StreamSink : ChunkSink {
    StreamSink(int fd, std::chrono::milliseconds timeout) : fd(fd), timeout(timeout) {}
    bool write(std::string_view data) override {
      if (data.empty()) return ok;
      return ok = ok && write_all(fd, chunk(data), timeout);
    }
    bool done() override { return ok = ok && write_all(fd, "0\r\n\r\n", timeout); }
    int fd;
    std::chrono::milliseconds timeout;
    bool ok = true;
  };

  // The one timer of the connection bounds the current phase; a later phase invalidates it.
  void arm(std::chrono::milliseconds d) {
    const uint64_t phase = ++phase_;
    timed_out_ = false;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), phase](error_code ec) {
      if (ec || phase != self->phase_) return;
      self->timed_out_ = true;
      error_code ignored;
      self->sock_.cancel(ignored);
    });
  }
  void disarm() {
    ++phase_;
    timer_.cancel();
  }

  // Between requests: an idle wait that holds no thread and no parser.
  void wait_idle() {
    if (t_.stopping.load()) return close_now();
    if (buf_.size() > 0) return read_head();  // a pipelined request is already here
    reading_ = true;
    arm(t_.opt.keep_alive_timeout);
    sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
      self->disarm();
      if (ec || self->timed_out_ || self->t_.stopping.load()) return self->close_now();
      self->read_head();
    });
  }

  void read_head() {
    reading_ = true;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(t_.opt.header_limit_bytes));
    // No body limit yet: a declared length over it is check_request_head's 413 (Beast would refuse
    // the head with a bare error); the limit is set before the body is read.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    buf_.recording = true;
    buf_.consumed.clear();
    request_ = Request{};
    request_.remote = remote_;
    request_.fd = fd_;
    arm(t_.opt.header_timeout);
    http::async_read_header(sock_, buf_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      self->disarm();
      self->on_head(ec);
    });
  }

  void on_head(error_code ec) {
    reading_ = false;
    buf_.recording = false;
    const std::string raw_head = ec ? buf_.head_bytes() : std::string();
    buf_.consumed.clear();
    if (timed_out_)
      return early(ApiError{408, "invalid_request_error",
                            "The request head was not complete within " + seconds_text(t_.opt.header_timeout) + " s",
                            "", "request_timeout"},
                   /*linger=*/true);
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || (ec && !is_http_error(ec))) {
      return close_now();  // the client left (or a socket error): nobody to answer
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
      return early(ApiError{431, "invalid_request_error",
                            "The request line and headers are larger than the server's limit of " +
                                std::to_string(t_.opt.header_limit_bytes) + " bytes",
                            "", "request_header_fields_too_large"},
                   true);
    if (ec) {
      // Beast stops at a conflicting or malformed framing field; read the head again without
      // framing checks so the answer can say what was wrong.
      const std::string_view raw(raw_head);
      const size_t end = raw.find("\r\n\r\n");
      if (end != std::string_view::npos) {
        if (auto head = parse_head_leniently(raw.substr(0, end + 4))) {
          fill_request(*head);
          ApiError e = check_request_head(*head, t_.opt.policy);
          if (!e.ok()) return early(e, true);
        }
      }
      return early(ApiError{400, "invalid_request_error", "The HTTP request could not be read: " + ec.message(), "",
                            ""},
                   true);
    }
    const RequestHead& head = parser_->get().base();
    fill_request(head);
    if (ApiError e = check_request_head(head, t_.opt.policy); !e.ok())
      return early(e, declares_body(head) || e.status == 431);
    client_close_ = !parser_->keep_alive();
    if (parser_->is_done()) return dispatch();
    const auto expect = head.find(http::field::expect);
    if (expect != head.end() && beast::iequals(expect->value(), "100-continue")) {
      // A small write to a socket whose send buffer is empty: it does not block.
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      write_all(fd_, std::string_view(kContinue, sizeof kContinue - 1), std::chrono::milliseconds(0));
    }
    // Reserve the body's bytes from the budget all connections share, before any is read.
    const auto declared = parser_->content_length();
    const int64_t want = declared ? static_cast<int64_t>(*declared) : t_.opt.policy.body_limit_bytes;
    if (t_.body_bytes.fetch_add(want) + want > t_.opt.body_memory_limit_bytes) {
      t_.body_bytes.fetch_sub(want);
      return early(unavailable("The server is receiving too many request bodies at once (" +
                                   std::to_string(t_.opt.body_memory_limit_bytes >> 20) + " MiB); retry later",
                               "overloaded"),
                   true);
    }
    body_reserved_ = want;
    parser_->body_limit(static_cast<std::uint64_t>(t_.opt.policy.body_limit_bytes));
    arm(t_.opt.body_timeout);
    http::async_read(sock_, buf_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      self->disarm();
      self->on_body(ec);
    });
  }

  void on_body(error_code ec) {
    release_body();  // the body is read (or failed): it is the worker pool's, bounded there
    if (timed_out_)
      return early(ApiError{408, "invalid_request_error",
                            "The request body was not complete within " + seconds_text(t_.opt.body_timeout) + " s",
                            "", "request_timeout"},
                   true);
    if (ec == http::error::body_limit)
      return early(ApiError{413, "invalid_request_error",
                            "The request body is larger than the server's limit of " +
                                std::to_string(t_.opt.policy.body_limit_bytes) + " bytes",
                            "", "request_too_large"},
                   true);
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || (ec && !is_http_error(ec)))
      return close_now();
    if (ec)
      return early(bad_request("The request body could not be read (" + ec.message() + ")", ""), true);
    dispatch();
  }

  void release_body() {
    if (body_reserved_ > 0) t_.body_bytes.fetch_sub(body_reserved_);
    body_reserved_ = 0;
  }

  void fill_request(const RequestHead& head) {
    request_.method = std::string(head.method_string());
    request_.target = std::string(head.target());
    request_.path = std::string(target_path(request_.target));
  }

  void dispatch() {
    request_.body = std::move(parser_->get().body());
    parser_.reset();
    Request r = request_;
    request_.body.clear();
    t_.dispatch(std::move(r), shared_from_this());
  }

  // An answer from the I/O thread before the request was complete. `linger`: a body (or the rest
  // of a refused head) may still be coming; drain it instead of reading it as a next request.
  void early(const ApiError& e, bool linger) {
    parser_.reset();
    Response r = error_response(e, error_dialect(request_.path));
    if (t_.answered) t_.answered(request_, r.status);
    const bool close = linger || t_.stopping.load();
    auto bytes = std::make_shared<std::string>(response_head(r, static_cast<int64_t>(r.body.size()), close));
    bytes->append(r.body);
    write(bytes, close, linger);
  }

  void write(std::shared_ptr<std::string> bytes, bool close, bool linger) {
    arm(t_.opt.write_timeout);
    asio::async_write(sock_, asio::buffer(*bytes), [self = shared_from_this(), bytes, close, linger](error_code ec, size_t) {
      self->disarm();
      if (ec || self->timed_out_) return self->close_now();
      self->after_response(close, linger);
    });
  }

  void after_response(bool close, bool linger) {
    ++served_;
    if (linger) {
      buf_.clear();
      error_code ec;
      sock_.cancel(ec);
      const int fd = sock_.release(ec);
      if (ec) return close_now();
      t_.closer.hand_over(fd);  // FIN, then drains in the background; `fd` now reads end of file
      ::close(fd);
      return;
    }
    if (close) return close_now();
    wait_idle();
  }

  void close_now() {
    reading_ = false;
    error_code ec;
    timer_.cancel();
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    sock_.close(ec);
  }

  HttpTransport::Impl& t_;
  tcp::socket sock_;
  HeadBuffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  asio::steady_timer timer_;
  const int fd_;
  std::string remote_;
  Request request_;       // the request being read or served (without its body once dispatched)
  uint64_t phase_ = 0;    // I/O thread: bumps on every arm/disarm
  bool timed_out_ = false;
  bool reading_ = false;  // waiting for (or reading) a request head: safe to close on stop
  bool client_close_ = false;
  int served_ = 0;
  int64_t body_reserved_ = 0;  // bytes of t_.body_bytes this connection's body holds
};

}  // namespace

void HttpTransport::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket sock) {
    if (stopping.load() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors (EMFILE) and the like: the connection stays in the backlog; retry soon.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](error_code e) {
        if (!e) accept();
      });
      return;
    }
    error_code ignored;
    sock.set_option(tcp::no_delay(true), ignored);  // header and body are separate writes on streams
    if (open.load() >= opt.max_connections) {
      reject(std::move(sock));
    } else {
      std::make_shared<Connection>(*this, std::move(sock))->start();
    }
    accept();
  });
}

void HttpTransport::Impl::reject(tcp::socket sock) {
  Response r = error_response(unavailable("The server has " + std::to_string(opt.max_connections) +
                                              " open connections, its limit (--max-connections); retry later",
                                          "overloaded"));
  r.close = true;
  if (answered) answered(Request{}, r.status);
  error_code ec;
  sock.non_blocking(true, ec);
  const int fd = sock.release(ec);
  if (ec) return;
  // A fresh socket's send buffer is empty: this small write does not block.
  write_all(fd, response_head(r, static_cast<int64_t>(r.body.size()), true) + r.body, std::chrono::milliseconds(0));
  closer.hand_over(fd);  // a request the client already sent is drained, not answered with a reset
  ::close(fd);
}

HttpTransport::HttpTransport(TransportOptions options, Dispatch dispatch, Answered answered)
    : impl_(std::make_shared<Impl>()) {
  impl_->opt = std::move(options);
  impl_->dispatch = std::move(dispatch);
  impl_->answered = std::move(answered);
}

HttpTransport::~HttpTransport() { stop(); }

Status HttpTransport::start() {
  Impl& t = *impl_;
  error_code ec;
  tcp::resolver resolver(t.io);
  const auto found = resolver.resolve(t.opt.host, std::to_string(t.opt.port), tcp::resolver::passive, ec);
  const std::string where = t.opt.host + ":" + std::to_string(t.opt.port);
  if (ec || found.empty()) return IOError("cannot listen on " + where + ": " + (ec ? ec.message() : "no address"));
  const tcp::endpoint ep = found.begin()->endpoint();
  // DECISION: SO_REUSEADDR only, so a second `strata serve` on the port fails with "address in use"
  // instead of silently sharing its connections (SO_REUSEPORT).
  t.acceptor.open(ep.protocol(), ec);
  if (!ec) t.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) t.acceptor.bind(ep, ec);
  if (!ec) t.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    t.acceptor.close(ignored);
    return IOError("cannot listen on " + where + " (" + ec.message() +
                   "; address in use, or not an address of this machine)");
  }
  t.port = t.acceptor.local_endpoint(ec).port();
  t.work.emplace(t.io.get_executor());
  t.accept();
  t.thread = std::thread([impl = impl_] {
    for (;;) {
      try {
        impl->io.run();
        break;
      } catch (...) {
        // A handler threw (nothing in strata should): keep serving the other connections.
      }
    }
    impl->ran.set_value();
  });
  return Status();
}

int HttpTransport::port() const { return impl_->port; }

int HttpTransport::open_connections() const { return impl_->open.load(); }

void HttpTransport::stop_accepting() {
  Impl& t = *impl_;
  if (t.stopping.exchange(true) || !t.thread.joinable()) return;
  asio::post(t.io, [impl = impl_] {
    error_code ec;
    impl->acceptor.close(ec);
    impl->accept_retry.cancel();
    std::vector<std::shared_ptr<Connection>> all;
    {
      std::lock_guard<std::mutex> l(impl->live_mu);
      for (auto& [p, w] : impl->live)
        if (auto c = w.lock()) all.push_back(std::move(c));
    }
    for (auto& c : all) c->close_if_idle();
  });
}

void HttpTransport::stop(std::chrono::milliseconds grace) {
  Impl& t = *impl_;
  stop_accepting();
  if (!t.thread.joinable()) return;
  t.work.reset();
  // Responses still being written get `grace`; then whatever remains is cut.
  if (t.ran.get_future().wait_for(grace) != std::future_status::ready) t.io.stop();
  t.thread.join();
  // Connections still referenced by pending handlers are closed with the io_context's destruction.
}

}  // namespace strata::server
