// An API error (chat-and-api.md §6.6): HTTP status, type, message, param, code, and its JSON
// envelope: OpenAI's {"error":{"message","type","param","code"}} or, on the Anthropic Messages
// routes, Anthropic's {"type":"error","error":{"type","message"}}.
// Thread safety: values.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace strata::server {

struct ApiError {
  int status = 0;        // 0 = no error
  std::string type;      // invalid_request_error, authentication_error, server_error
  std::string message;   // human text: names the field and what was expected
  std::string param;     // "" = null; else the field path, e.g. "messages[2].content"
  std::string code;      // "" = null; e.g. invalid_value, model_not_found

  bool ok() const { return status == 0; }
  // {"error":{...}} as compact JSON.
  std::string to_json() const;
  // {"type":"error","error":{"type":...,"message":...}} as compact JSON (Anthropic's envelope; the
  // type from anthropic_error_type, the param folded into the message when it does not name it).
  std::string to_anthropic_json() const;
};

// Which envelope a route's errors use.
enum class ErrorDialect { kOpenAI, kAnthropic };

// kAnthropic for the Anthropic Messages routes (/v1/messages and below), else kOpenAI.
ErrorDialect error_dialect(std::string_view path);

// Anthropic's error type for an error: 400-class invalid_request_error, 401 authentication_error,
// 404 not_found_error, 413 request_too_large, 503 overloaded (queue full) overloaded_error, other
// 5xx api_error.
std::string anthropic_error_type(const ApiError& e);

// 400 invalid_request_error.
ApiError bad_request(std::string message, std::string param = "", std::string code = "invalid_value");
// 404 model_not_found for `model`.
ApiError model_not_found(const std::string& model);
// 500 server_error / internal_error.
ApiError internal_error(std::string message);
// 503 server_error with `code` (model_loading, overloaded, unhealthy).
ApiError unavailable(std::string message, std::string code);

// Maps a Status from the renderer / scheduler to an API error: kInvalidArgument -> 400 (param taken
// from a leading "field.path: " of the message when there is one), kResourceExhausted -> 503
// overloaded, everything else -> 500 internal_error.
ApiError from_status(const Status& s);

}  // namespace strata::server
