// An error as the OpenAI API reports it: an HTTP status plus the envelope fields
// {"error": {"message", "type", "param", "code"}}. Every failure the server answers with goes
// through this type, so clients (the official SDKs raise typed exceptions from the status
// and the envelope) see the shapes they expect.
#pragma once

#include <string>

namespace lancet::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};

inline ApiError bad_request(std::string message, std::string param = "", std::string code = "") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}
inline ApiError not_found(std::string message, std::string param = "", std::string code = "") {
  return ApiError{404, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}
inline ApiError server_error(int status, std::string message, std::string type, std::string code = "") {
  return ApiError{status, std::move(message), std::move(type), "", std::move(code)};
}

}  // namespace lancet::server
