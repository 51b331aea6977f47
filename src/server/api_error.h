// An error as the OpenAI API reports it: an HTTP status plus the envelope fields
// {"error": {"message", "type", "param", "code"}}. Every failure the server answers with goes
// through this type, so clients (the official SDKs raise typed exceptions from the status
// and the envelope) see the shapes they expect. `code` is always a string, as OpenAI sends it
// (its SDKs type it `str | None`); vLLM puts the HTTP status there as a number, which a client
// reads from the response status instead.
#pragma once

#include <string>

namespace lancet::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> default_error_code(status)
};

// The code of an error that names no more specific one: a fixed string per HTTP status.
inline const char* default_error_code(int status) {
  switch (status) {
    case 400: return "invalid_request";
    case 401: return "invalid_api_key";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 408: return "timeout";
    case 413: return "request_too_large";
    case 429: return "too_many_requests";
    case 431: return "headers_too_large";
    case 500: return "internal_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request";
  }
}

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
