// Request guards (see http_guards.h).
#include "server/http_guards.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace lancet::server {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t") + 1);
  return s;
}

// "name:port" -> "name"; "[::1]:8000" -> "::1"; lower case.
std::string host_name(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    return lower(host.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  return lower(host.substr(0, host.find(':')));
}

// An address typed as such cannot be rebound: DNS rebinding needs a name the attacker owns.
// A --host value: a name, an IPv4 address, or an IPv6 address with or without brackets.
std::string listen_name(const std::string& host) {
  return std::count(host.begin(), host.end(), ':') > 1 && host.front() != '[' ? lower(host) : host_name(host);
}

bool is_address_or_localhost(const std::string& name) {
  unsigned char buf[16];
  return name == "localhost" || ::inet_pton(AF_INET, name.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

bool is_wildcard(const std::string& name) { return name == "0.0.0.0" || name == "::" || name.empty(); }

bool is_token_list(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ';
  });
}

bool same_origin(std::string_view origin, std::string_view host_header) {
  if (host_header.empty()) return false;
  const std::string o = lower(origin), h = lower(host_header);
  return o == "http://" + h || o == "https://" + h;
}

}  // namespace

std::optional<ApiError> check_content_length(const httplib::Request& req, size_t max_body_bytes) {
  const size_t count = req.get_header_value_count("Content-Length");
  if (count == 0) return std::nullopt;
  // A body framed two ways is the classic request-smuggling shape (RFC 9112 section 6.3).
  if (req.has_header("Transfer-Encoding"))
    return bad_request("Content-Length and Transfer-Encoding must not be sent together", "", "invalid_content_length");
  std::string first;
  for (size_t i = 0; i < count; ++i) {
    const std::string v = trim(req.get_header_value("Content-Length", i));
    if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return bad_request("Content-Length must be a non-negative decimal number, not '" + v.substr(0, 64) + "'", "",
                         "invalid_content_length");
    if (i == 0) first = v;
    else if (v != first) return bad_request("conflicting Content-Length headers", "", "invalid_content_length");
  }
  const size_t digits = first.find_first_not_of('0');
  const std::string sig = digits == std::string::npos ? "0" : first.substr(digits);
  if (sig.size() > 19 || std::stoull(sig) > max_body_bytes)
    return ApiError{413, "the request body is too large (the limit is " + std::to_string(max_body_bytes) + " bytes)",
                    "invalid_request_error", "", "request_too_large"};
  return std::nullopt;
}

bool has_request_body(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  const std::string v = trim(req.get_header_value("Content-Length"));
  return !v.empty() && v.find_first_not_of('0') != std::string::npos;
}

bool host_allowed(std::string_view host_header, const ServerConfig& config) {
  if (!config.api_key.empty() || host_header.empty()) return true;
  const std::string name = host_name(host_header);
  if (is_address_or_localhost(name) || name == listen_name(config.host)) return true;
  for (const std::string& h : config.allowed_hosts)
    if (h == "*" || host_name(h) == name) return true;
  // Listening on every address, any name may point here (LAN names, cluster service names)
  // unless the allowed names are listed.
  return config.allowed_hosts.empty() && is_wildcard(listen_name(config.host));
}

bool is_loopback_host(const std::string& host) {
  const std::string name = listen_name(host);
  return name == "localhost" || name == "::1" || name.rfind("127.", 0) == 0;
}

bool origin_allowed(std::string_view origin, std::string_view host_header, const ServerConfig& config) {
  if (origin.empty() || same_origin(origin, host_header)) return true;
  const std::string o = lower(origin);
  for (const std::string& allowed : config.allowed_origins)
    if (allowed == "*" || lower(allowed) == o) return true;
  return false;
}

void add_cors_headers(const httplib::Request& req, const ServerConfig& config, httplib::Response& res) {
  const std::string origin = req.get_header_value("Origin");
  if (origin.empty() || same_origin(origin, req.get_header_value("Host"))) return;
  if (!origin_allowed(origin, req.get_header_value("Host"), config)) return;
  const bool any = std::find(config.allowed_origins.begin(), config.allowed_origins.end(), "*") !=
                   config.allowed_origins.end();
  // httplib's set_header adds a line; a second call must not send the header twice.
  res.headers.erase("Access-Control-Allow-Origin");
  res.headers.erase("Vary");
  res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
  if (!any) res.set_header("Vary", "Origin");
}

void answer_options(const httplib::Request& req, const ServerConfig& config, httplib::Response& res) {
  res.status = 204;
  res.set_header("Allow", "GET, POST, OPTIONS");
  if (!req.has_header("Origin") || !req.has_header("Access-Control-Request-Method")) return;
  add_cors_headers(req, config, res);
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  // The official SDKs send their own headers (x-stainless-*, openai-*); allow what was asked
  // for, as long as it is a plain list of header names.
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers",
                 !asked.empty() && is_token_list(asked) ? asked : std::string("Authorization, Content-Type"));
  res.set_header("Access-Control-Max-Age", "600");
}

}  // namespace lancet::server
