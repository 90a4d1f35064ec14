#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace strata::server {

std::string ApiError::to_json() const {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
  e["code"] = code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code);
  nlohmann::ordered_json j;
  j["error"] = std::move(e);
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string ApiError::to_anthropic_json() const {
  nlohmann::ordered_json e;
  e["type"] = anthropic_error_type(*this);
  // Anthropic's envelope has no param: the field path goes into the message unless it is there.
  e["message"] = param.empty() || message.find(param) != std::string::npos ? message : param + ": " + message;
  nlohmann::ordered_json j;
  j["type"] = "error";
  j["error"] = std::move(e);
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

ErrorDialect error_dialect(std::string_view path) {
  constexpr std::string_view kMessages = "/v1/messages";
  const bool anthropic = path.substr(0, kMessages.size()) == kMessages &&
                         (path.size() == kMessages.size() || path[kMessages.size()] == '/');
  return anthropic ? ErrorDialect::kAnthropic : ErrorDialect::kOpenAI;
}

std::string anthropic_error_type(const ApiError& e) {
  switch (e.status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return e.code == "overloaded" ? "overloaded_error" : "api_error";
    default: return e.status >= 500 ? "api_error" : "invalid_request_error";
  }
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, "invalid_request_error", std::move(message), std::move(param), std::move(code)};
}

ApiError model_not_found(const std::string& model) {
  return ApiError{404, "invalid_request_error", "The model '" + model + "' does not exist (served: see GET /v1/models)",
                  "model", "model_not_found"};
}

ApiError internal_error(std::string message) {
  return ApiError{500, "server_error", std::move(message), "", "internal_error"};
}

ApiError unavailable(std::string message, std::string code) {
  return ApiError{503, "server_error", std::move(message), "", std::move(code)};
}

ApiError from_status(const Status& s) {
  if (s.ok()) return ApiError{};
  switch (s.code()) {
    case StatusCode::kInvalidArgument: {
      // "messages[3]: ..." / "tool_choice: ..." -> param
      const std::string& m = s.message();
      const size_t colon = m.find(": ");
      std::string param;
      if (colon != std::string::npos && colon > 0 && m.find(' ') > colon) param = m.substr(0, colon);
      return bad_request(m, param);
    }
    case StatusCode::kResourceExhausted:
      return unavailable(s.message(), "overloaded");
    default:
      return internal_error(s.to_string());
  }
}

}  // namespace strata::server
