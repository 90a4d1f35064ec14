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
