// libFuzzer target for the HTTP front end: the input is the byte stream of one client
// connection (any number of pipelined requests, truncated or malformed ones included), served
// by HttpListener's connection loop over a socketpair, with the request guards the server runs
// before routing (header size, Content-Length, Host, Origin/CORS, OPTIONS) and a POST route
// that reads its body and parses it as a chat request. Whatever arrives must be answered or
// the connection closed, within the loop's own limits: no crash, hang or leak, and every byte
// the server sends must be a sequence of HTTP/1.1 responses.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "server/http_guards.h"
#include "server/http_listener.h"
#include "server/openai_json.h"

namespace {

using lancet::server::ApiError;
using lancet::server::HttpListener;
using lancet::server::ServerConfig;

ServerConfig make_config() {
  ServerConfig c;
  c.max_body_bytes = 16 << 10;
  c.max_header_bytes = 4 << 10;
  c.allowed_origins = {"https://app.example"};
  return c;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(lancet::server::dump_json(lancet::server::error_json(e)), "application/json");
}

// The server's pre-routing order (HttpServer::Impl::pre_route), without auth and drain.
httplib::Server::HandlerResponse pre_route(const ServerConfig& config, const httplib::Request& req,
                                           httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  size_t header_bytes = 0;
  for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
  if (header_bytes > config.max_header_bytes) {
    send_error(res, ApiError{431, "the request headers are too large", "invalid_request_error", "", ""});
    res.set_header("Connection", "close");
    return HR::Handled;
  }
  if (auto err = lancet::server::check_content_length(req, config.max_body_bytes)) {
    send_error(res, *err);
    res.set_header("Connection", "close");
    return HR::Handled;
  }
  if (!lancet::server::host_allowed(req.get_header_value("Host"), config) ||
      !lancet::server::origin_allowed(req.get_header_value("Origin"), req.get_header_value("Host"), config)) {
    send_error(res, ApiError{403, "not allowed", "invalid_request_error", "", ""});
    res.set_header("Connection", "close");
    return HR::Handled;
  }
  lancet::server::add_cors_headers(req, config, res);
  if (req.method == "OPTIONS") {
    lancet::server::answer_options(req, config, res);
    if (lancet::server::has_request_body(req)) res.set_header("Connection", "close");
    return HR::Handled;
  }
  if ((req.method == "GET" || req.method == "HEAD") && lancet::server::has_request_body(req))
    res.set_header("Connection", "close");
  return HR::Unhandled;
}

HttpListener* make_listener() {
  static const ServerConfig config = make_config();
  auto* http = new HttpListener();
  // A bound socket keeps the connection loop running; nothing connects to it.
  if (!http->bind_socket({.host = "127.0.0.1", .port = 0, .backlog = 1, .keep_alive_max = 16}).ok()) std::abort();
  http->set_read_timeout(1);
  http->set_write_timeout(1);
  http->set_keep_alive_timeout(1);
  http->set_payload_max_length(config.max_body_bytes);
  http->set_pre_routing_handler(
      [](const httplib::Request& req, httplib::Response& res) { return pre_route(config, req, res); });
  http->Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{}", "application/json"); });
  http->Post("/v1/chat/completions", [](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
    std::string body;
    const bool ok = reader([&](const char* d, size_t n) {
      if (body.size() + n > config.max_body_bytes) return false;
      body.append(d, n);
      return true;
    });
    if (!ok) {
      send_error(res, ApiError{413, "the request body is too large", "invalid_request_error", "", ""});
      res.set_header("Connection", "close");
      return;
    }
    lancet::server::ApiRequest r;
    if (auto err = lancet::server::parse_chat_request(body, config.limits, &r)) return send_error(res, *err);
    res.set_content(R"({"ok":true})", "application/json");
  });
  return http;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static HttpListener* http = make_listener();
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  // The client: sends the input, half-closes, and reads every answer (so the server never
  // blocks on a full socket buffer).
  std::string answers;
  std::thread client([&] {
    size_t off = 0;
    while (off < size) {
      const ssize_t n = ::send(fds[0], data + off, size - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::shutdown(fds[0], SHUT_WR);
    char buf[16 << 10];
    for (ssize_t n; (n = ::recv(fds[0], buf, sizeof(buf), 0)) > 0;) answers.append(buf, static_cast<size_t>(n));
  });
  http->serve_connection(fds[1]);  // closes fds[1]
  client.join();
  ::close(fds[0]);
  if (!answers.empty() && answers.compare(0, 9, "HTTP/1.1 ") != 0) std::abort();
  return 0;
}
