// The checks a request head gets before any of its body is read (chat-and-api.md §6.6): framings
// a proxy and this server could read differently (request smuggling), a body where none is taken,
// a Content-Length that is not a byte count or is over --body-limit, too many header fields, a
// missing or wrong API key, a non-JSON upload. Answering from the head alone means an oversized or
// unwanted body is never read, buffered or waited for.
// Thread safety: pure functions. The HTTP fuzz target feeds raw bytes through Beast's parser (and
// parse_head_leniently) into check_request_head.
#pragma once

#include <boost/beast/http/message.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace strata::server {

using RequestHead = boost::beast::http::request_header<>;

// What the checks compare against (from ServerOptions).
struct HeadPolicy {
  int64_t body_limit_bytes = 64ll << 20;  // larger declared bodies get 413
  std::string api_key;                    // "" = none; else /v1/* needs "Authorization: Bearer KEY" or "x-api-key: KEY"
  int max_header_fields = 100;            // more header fields get 431
};

// The early answer for `head`, or an ApiError with ok() when the request may go on (its body, if
// any, is read next). Order: 431 too many fields, 501 a Transfer-Encoding other than chunked, 400
// both Transfer-Encoding and Content-Length / two Content-Lengths / a body on a method that takes
// none / a Content-Length that is not a byte count, 413 over the body limit, 400 chunked where no
// body is taken, 401 API key, 415 multipart on the body endpoints.
ApiError check_request_head(const RequestHead& head, const HeadPolicy& policy);

// True when `head` announces a body (Transfer-Encoding, or a Content-Length other than "0"): an
// answer given before reading it must end the connection, so the body is never read as a request.
bool declares_body(const RequestHead& head);

// The path of a request target: before '?' (no percent-decoding: routes are plain ASCII).
std::string_view target_path(std::string_view target);

// True for the endpoints that take a request body (POST /v1/chat/completions, /v1/completions,
// /v1/responses, /v1/messages, /v1/messages/count_tokens).
bool takes_body(const RequestHead& head);

// A head Beast refused (a conflicting or malformed Content-Length / Transfer-Encoding: Beast stops
// at the field) parsed again without framing checks, so check_request_head can say what was wrong:
// `raw` is the bytes up to and including the blank line. nullopt when the request line or a field
// line cannot be split at all.
std::optional<RequestHead> parse_head_leniently(std::string_view raw);

}  // namespace strata::server
