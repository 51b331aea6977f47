// Checks every request passes before a route sees it, kept apart from the routes so each can be
// tested on its own: the Content-Length header (answered before any body byte is read), the
// Host header (DNS rebinding: a page on evil.example whose name later resolves to 127.0.0.1
// must not reach an unauthenticated local server) and CORS (which browser origins may call).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/httplib_include.h"
#include "server/server_config.h"

namespace lancet::server {

// 400 for a Content-Length that is not one decimal number (negative, text, several different
// values, or together with Transfer-Encoding), 413 for one over `max_body_bytes`.
std::optional<ApiError> check_content_length(const httplib::Request& req, size_t max_body_bytes);

// True when the request carries a body that nothing will read if it is answered early.
bool has_request_body(const httplib::Request& req);

// Whether the Host header (name[:port]) may reach this server: an IP address, localhost, the
// --host name, a name in config.allowed_hosts ("*" = any), or any name when listening on
// every address (0.0.0.0, ::) and no list is given. Always true with an API key (a rebinding
// page cannot know the key) and without a Host header (browsers always send one).
bool host_allowed(std::string_view host_header, const ServerConfig& config);

// True for 127.0.0.0/8, ::1 and localhost: only this machine can connect.
bool is_loopback_host(const std::string& host);

// Whether a browser page of `origin` may call the server: same origin as `host_header`, or
// listed in config.allowed_origins ("*" = any). An empty origin (not a browser) is allowed.
bool origin_allowed(std::string_view origin, std::string_view host_header, const ServerConfig& config);

// Adds Access-Control-Allow-Origin (and Vary) when `origin` is cross-origin and allowed.
void add_cors_headers(const httplib::Request& req, const ServerConfig& config, httplib::Response& res);

// Answers an OPTIONS request: a CORS preflight of an allowed origin gets 204 with the allowed
// methods and headers; any other OPTIONS gets 204 with Allow.
void answer_options(const httplib::Request& req, const ServerConfig& config, httplib::Response& res);

}  // namespace lancet::server
