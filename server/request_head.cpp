#include "server/request_head.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <iterator>
#include <limits>

namespace strata::server {

namespace http = boost::beast::http;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The Content-Length a request declares: nullopt when absent, -1 when not a decimal number; a
// number too large for int64 reads as INT64_MAX (so it gets 413, not "not a number").
std::optional<int64_t> declared_body_bytes(const RequestHead& head) {
  const auto it = head.find(http::field::content_length);
  if (it == head.end()) return std::nullopt;
  const std::string_view v(it->value().data(), it->value().size());
  int64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || end != v.data() + v.size() || v[0] == '-') return -1;
  if (ec == std::errc::result_out_of_range) return std::numeric_limits<int64_t>::max();
  return ec == std::errc() ? n : -1;
}

// Methods whose body is read; a body on any other method is refused (a proxy may not forward it).
bool body_is_read(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

std::string value_of(const RequestHead& head, http::field f) {
  const auto it = head.find(f);
  return it == head.end() ? std::string() : std::string(it->value());
}

std::string value_of(const RequestHead& head, std::string_view name) {
  const auto it = head.find(boost::beast::string_view(name.data(), name.size()));
  return it == head.end() ? std::string() : std::string(it->value());
}

// Beast 1.74 takes boost::string_view.
boost::beast::string_view bsv(std::string_view s) { return {s.data(), s.size()}; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view target_path(std::string_view target) { return target.substr(0, target.find('?')); }

bool takes_body(const RequestHead& head) {
  const std::string_view path = target_path(std::string_view(head.target().data(), head.target().size()));
  return head.method_string() == "POST" &&
         (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/responses" ||
          path == "/v1/messages" || path == "/v1/messages/count_tokens");
}

bool declares_body(const RequestHead& head) {
  return head.count(http::field::transfer_encoding) > 0 || declared_body_bytes(head).value_or(0) != 0;
}

ApiError check_request_head(const RequestHead& head, const HeadPolicy& policy) {
  const std::string method(head.method_string());
  const std::string path(target_path(std::string_view(head.target().data(), head.target().size())));
  const auto n_fields = std::distance(head.begin(), head.end());
  if (n_fields > policy.max_header_fields)
    return ApiError{431, "invalid_request_error",
                    "The request has " + std::to_string(n_fields) + " header fields; the server's limit is " +
                        std::to_string(policy.max_header_fields),
                    "", "request_header_fields_too_large"};
  const std::optional<int64_t> declared = declared_body_bytes(head);
  const bool has_te = head.count(http::field::transfer_encoding) > 0;
  const std::string te_raw = value_of(head, http::field::transfer_encoding);
  const bool chunked = has_te && lower(te_raw) == "chunked";
  const bool body = declares_body(head);
  // Framing a proxy and this server could read differently is refused (request smuggling).
  if (has_te && !chunked)
    return ApiError{501, "invalid_request_error",
                    "Transfer-Encoding '" + te_raw + "' is not supported (only chunked)", "",
                    "unsupported_transfer_encoding"};
  if (has_te && declared) return bad_request("a request may not have both Transfer-Encoding and Content-Length", "");
  if (head.count(http::field::transfer_encoding) > 1)
    return bad_request("a request may not have more than one Transfer-Encoding", "");
  if (head.count(http::field::content_length) > 1)
    return bad_request("a request may not have more than one Content-Length", "");
  if (body && !body_is_read(method)) return bad_request(method + " requests take no body", "");
  if (declared && *declared < 0)
    return bad_request("Content-Length '" + value_of(head, http::field::content_length) + "' is not a byte count", "");
  if (declared && *declared > policy.body_limit_bytes)
    return ApiError{413, "invalid_request_error",
                    "The request body is larger than the server's limit of " + std::to_string(policy.body_limit_bytes) +
                        " bytes",
                    "", "request_too_large"};
  if (chunked && !takes_body(head))
    return bad_request(method + " " + path +
                           " takes no chunked request body (only POST /v1/chat/completions, /v1/completions, "
                           "/v1/responses, /v1/messages and /v1/messages/count_tokens do)",
                       "");
  // The key comes as OpenAI clients send it (Authorization: Bearer) or as Anthropic's do (x-api-key).
  if (!policy.api_key.empty() && path.rfind("/v1/", 0) == 0 &&
      value_of(head, http::field::authorization) != "Bearer " + policy.api_key &&
      value_of(head, "x-api-key") != policy.api_key)
    return ApiError{401, "authentication_error",
                    head.count(http::field::authorization) || head.count("x-api-key")
                        ? "Incorrect API key provided"
                        : "Missing API key: send Authorization: Bearer <key> (or x-api-key: <key>)",
                    "", "invalid_api_key"};
  if (takes_body(head) && lower(value_of(head, http::field::content_type)).rfind("multipart/", 0) == 0)
    return ApiError{415, "invalid_request_error", "The request body must be JSON (Content-Type: application/json)",
                    "", "unsupported_media_type"};
  return {};
}

std::optional<RequestHead> parse_head_leniently(std::string_view raw) {
  RequestHead head;
  bool first = true;
  while (!raw.empty()) {
    const size_t eol = raw.find('\n');
    const std::string_view line = trim(raw.substr(0, eol));
    raw = eol == std::string_view::npos ? std::string_view() : raw.substr(eol + 1);
    if (line.empty()) {
      if (first) continue;  // RFC 9112 2.2: empty lines before the request line are ignored
      break;
    }
    if (first) {
      first = false;
      const size_t a = line.find(' ');
      const size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
      if (b == std::string_view::npos || a == 0 || b == a + 1) return std::nullopt;
      head.method_string(bsv(line.substr(0, a)));
      head.target(bsv(line.substr(a + 1, b - a - 1)));
      head.version(line.substr(b + 1) == "HTTP/1.0" ? 10 : 11);
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    head.insert(bsv(trim(line.substr(0, colon))), bsv(trim(line.substr(colon + 1))));
  }
  if (first) return std::nullopt;
  return head;
}

}  // namespace strata::server
