// Fuzz target: HTTP/1.1 request heads and bodies as the server reads them: Boost.Beast's
// http::request_parser<http::string_body> over raw bytes, with the server's limits (64 KiB of request
// line + headers, --body-limit 64 MiB), then, when server/request_head.h exists, the server's own
// checks: check_request_head on a parsed head, and parse_head_leniently + check_request_head on the
// bytes of a head Beast refused (server/http_transport.cpp does exactly this).
//
// Input layout: byte 0 = how the bytes arrive (1 + byte0 % 64 bytes per read, so heads split at every
// point are tried), then the byte stream of one connection. Up to 8 pipelined requests are parsed
// one after another, as on a keep-alive connection.
// Properties: the parser never reads past what it was given; an early answer is one of the statuses
// the head checks document (400, 401, 413, 415, 431, 501); no body over the limit is accepted.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "fuzz/fuzz_support.h"

// Beast's own assertions stay on (BOOST_ENABLE_ASSERT_HANDLER, set for this target), except one that
// is wrong: basic_parser::parse_chunk_header asserts `n >= 5` when a final chunk "0\r\n" arrived in
// one read and the next read brings fewer than two more bytes. The code after it is correct (it
// searches for the end of the message and asks for more), so release builds (NDEBUG) are fine;
// fixed upstream in boostorg/beast PR 2861 (2024). Debug builds of the server against Boost 1.74
// would abort on such a segmented request. Replay: fuzz/corpus/http_request/chunked_final_byte_by_byte.
namespace boost {
void assertion_failed(char const* expr, char const* function, char const* file, long line) {
  const std::string_view f(file);
  if (std::string_view(expr) == "n >= 5" && f.size() >= 16 && f.substr(f.size() - 16) == "basic_parser.ipp")
    return;
  std::fprintf(stderr, "Boost assertion failed: %s in %s (%s:%ld)\n", expr, function, file, line);
  std::abort();
}
void assertion_failed_msg(char const* expr, char const* msg, char const* function, char const* file, long line) {
  std::fprintf(stderr, "Boost assertion failed: %s (%s) in %s (%s:%ld)\n", expr, msg, function, file, line);
  std::abort();
}
}  // namespace boost

#if STRATA_FUZZ_HAVE_REQUEST_HEAD
#include "server/request_head.h"
#endif

namespace {

namespace http = boost::beast::http;

// The server's defaults (server/options.h: header_limit_kib 64, body_limit_bytes 64 MiB,
// max_header_fields 100).
constexpr uint32_t kHeaderLimit = 64u << 10;
constexpr uint64_t kBodyLimit = 64ull << 20;

#if STRATA_FUZZ_HAVE_REQUEST_HEAD
void check_answer(const strata::server::ApiError& e) {
  if (e.ok()) return;
  const int s = e.status;
  STRATA_FUZZ_CHECK(s == 400 || s == 401 || s == 413 || s == 415 || s == 431 || s == 501,
                    "unexpected early status " + std::to_string(s));
  (void)e.to_json();
}

void check_head(const strata::server::RequestHead& head) {
  for (bool with_key : {false, true}) {
    strata::server::HeadPolicy policy;
    policy.body_limit_bytes = static_cast<int64_t>(kBodyLimit);
    if (with_key) policy.api_key = "sk-fuzz";
    check_answer(strata::server::check_request_head(head, policy));
  }
  (void)strata::server::declares_body(head);
  (void)strata::server::takes_body(head);
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = 1 + data[0] % 64;
  const std::string_view stream = strata::fuzz::as_text(data + 1, size - 1);
  size_t offset = 0;  // bytes of `stream` consumed by finished messages
  for (int message = 0; message < 8 && offset < stream.size(); ++message) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(kBodyLimit);
    boost::beast::error_code ec;
    size_t used = 0;       // bytes the parser consumed in this message
    size_t available = 0;  // bytes "received" so far (a flat buffer, as the server's)
    bool eof = false;
    while (!parser.is_done()) {
      if (used == available) {
        if (offset + available >= stream.size()) {
          eof = true;
          break;
        }
        available = std::min(stream.size() - offset, available + step);
      }
      const size_t n =
          parser.put(boost::asio::const_buffer(stream.data() + offset + used, available - used), ec);
      STRATA_FUZZ_CHECK(n <= available - used, "parser consumed more than it was given");
      used += n;
      if (ec == http::error::need_more) {
        ec = {};
        if (offset + available >= stream.size()) {
          eof = true;
          break;
        }
        available = std::min(stream.size() - offset, available + step);
        continue;
      }
      if (ec) break;
    }
    if (eof && !parser.is_done() && parser.got_some()) {
      parser.put_eof(ec);  // the client closed: a message without length ends here, or it is partial
    }
#if STRATA_FUZZ_HAVE_REQUEST_HEAD
    if (parser.is_header_done()) {
      check_head(parser.get().base());
      // The lenient parser on the same head (it need not accept all Beast does, e.g. obs-fold).
      const std::string_view raw = stream.substr(offset, used);
      const size_t end = raw.find("\r\n\r\n");
      if (end != std::string_view::npos)
        if (auto lenient = strata::server::parse_head_leniently(raw.substr(0, end + 4))) check_head(*lenient);
    } else if (ec && ec != http::error::header_limit && ec != http::error::buffer_overflow) {
      // The server's fallback for a head Beast refused.
      const std::string_view raw = stream.substr(offset, available);
      const size_t end = raw.find("\r\n\r\n");
      if (end != std::string_view::npos)
        if (auto head = strata::server::parse_head_leniently(raw.substr(0, end + 4))) check_head(*head);
    }
#endif
    if (ec || !parser.is_done()) break;  // the server answers (or closes) and ends the connection
    STRATA_FUZZ_CHECK(parser.get().body().size() <= kBodyLimit, "body over the limit");
    if (!parser.keep_alive()) break;
    offset += used;
  }
  return 0;
}
