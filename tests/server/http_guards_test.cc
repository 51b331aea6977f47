// The checks before routing, on a server without a model: a bad Content-Length is answered at
// once (400 or 413) in the error envelope, the body limit is the same for every content type,
// the envelope's `code` is always a string, the Host header is checked without an API key
// (DNS rebinding), and CORS answers preflights for the allowed origins only.
#include "server/http_guards.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "in_process_server.h"
#include "raw_http.h"

namespace lancet::testing {
namespace {

using nlohmann::json;

std::string post_with_length(const std::string& length, const std::string& extra_headers = "") {
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra_headers +
         "Content-Length: " + length + "\r\n\r\n{\"prompt\"";
}

TEST(HttpGuards, BadContentLengthIsAnsweredAtOnce) {
  server::ServerConfig cfg = test_config();
  cfg.max_body_bytes = 1 << 20;
  InProcessServer server(cfg);
  struct Case {
    std::string length;
    int status;
    std::string code;
  };
  for (const Case& c : {Case{"abc", 400, "invalid_content_length"}, Case{"-1", 400, "invalid_content_length"},
                        Case{"12 34", 400, "invalid_content_length"},
                        Case{"99999999999999999999999", 413, "request_too_large"},
                        Case{"1048577", 413, "request_too_large"}}) {
    const RawReply reply = raw_exchange(server.port(), post_with_length(c.length), 10);
    EXPECT_EQ(response_statuses(reply.text), std::vector<int>{c.status}) << c.length << ": " << reply.text;
    EXPECT_TRUE(reply.closed) << c.length;
    EXPECT_GE(reply.first_byte_seconds, 0) << c.length;
    EXPECT_LT(reply.first_byte_seconds, 5.0) << c.length << " was answered only after the read timeout";
    const json env = json::parse(last_body(reply.text), nullptr, false);
    ASSERT_TRUE(env.contains("error")) << reply.text;
    EXPECT_EQ(env["error"]["code"], c.code) << reply.text;
    EXPECT_EQ(env["error"]["type"], "invalid_request_error");
  }
  // Two different lengths, or a length beside chunked framing (request smuggling shapes).
  for (const std::string& extra : {std::string("Content-Length: 5\r\n"), std::string("Transfer-Encoding: chunked\r\n")}) {
    const RawReply reply = raw_exchange(server.port(), post_with_length("9", extra), 10);
    EXPECT_EQ(response_statuses(reply.text), std::vector<int>{400}) << extra << reply.text;
  }
  // A framing httplib would read until the client closes.
  const RawReply reply = raw_exchange(
      server.port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n{", 10);
  EXPECT_EQ(response_statuses(reply.text), std::vector<int>{400}) << reply.text;
  EXPECT_LT(reply.first_byte_seconds, 5.0);
}

TEST(HttpGuards, BodyLimitIsTheSameForEveryContentType) {
  server::ServerConfig cfg = test_config();
  cfg.max_body_bytes = 1 << 20;
  InProcessServer server(cfg);
  httplib::Client cli("127.0.0.1", server.port());
  // 100 KiB: over httplib's 8 KiB form limit, under the server's. No model, so an accepted
  // body gets 503 "loading"; a refused one 413.
  const std::string body = json{{"prompt", std::string(100 << 10, 'x')}}.dump();
  for (const char* type : {"application/json", "application/x-www-form-urlencoded", "text/plain"}) {
    auto r = cli.Post("/v1/completions", body, type);
    ASSERT_TRUE(r) << type;
    EXPECT_EQ(r->status, 503) << type << ": " << r->body;
  }
  const std::string big = json{{"prompt", std::string((1 << 20) + 10, 'x')}}.dump();
  for (const char* type : {"application/json", "application/x-www-form-urlencoded"}) {
    auto r = cli.Post("/v1/completions", big, type);
    ASSERT_TRUE(r) << type;
    EXPECT_EQ(r->status, 413) << type;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "request_too_large");
  }
  // Chunked framing has no Content-Length to check up front; the limit still holds.
  std::string chunked = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string chunk(64 << 10, 'x');
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
  for (int i = 0; i < 20; ++i) chunked += size + chunk + "\r\n";
  chunked += "0\r\n\r\n";
  const RawReply reply = raw_exchange(server.port(), chunked, 10);
  EXPECT_EQ(response_statuses(reply.text), std::vector<int>{413}) << reply.text.substr(0, 300);
}

TEST(HttpGuards, ErrorCodeIsAlwaysAString) {
  server::ServerConfig cfg = test_config();
  cfg.api_key = "k";
  InProcessServer server(cfg);
  httplib::Client cli("127.0.0.1", server.port());
  httplib::Headers auth = {{"Authorization", "Bearer k"}};
  struct Case {
    httplib::Result r;
    int status;
    const char* code;
  };
  Case cases[] = {{cli.Get("/nope"), 404, "not_found"},
                  {cli.Post("/v1/completions", "{}", "application/json"), 401, "invalid_api_key"},
                  {cli.Post("/v1/completions", auth, "{}", "application/json"), 503, "service_unavailable"}};
  for (const Case& c : cases) {
    ASSERT_TRUE(c.r);
    EXPECT_EQ(c.r->status, c.status);
    const json env = json::parse(c.r->body);
    ASSERT_TRUE(env["error"]["code"].is_string()) << c.r->body;
    EXPECT_EQ(env["error"]["code"], c.code) << c.r->body;
  }
}

TEST(HttpGuards, HostHeaderIsCheckedWithoutAnApiKey) {
  InProcessServer open(test_config());  // 127.0.0.1, no key
  httplib::Client cli("127.0.0.1", open.port());
  auto get_with_host = [&](const std::string& host) {
    auto r = cli.Get("/version", {{"Host", host}});
    return r ? r->status : -1;
  };
  EXPECT_EQ(get_with_host("evil.example:" + std::to_string(open.port())), 403);
  EXPECT_EQ(get_with_host("localhost:" + std::to_string(open.port())), 200);
  EXPECT_EQ(get_with_host("127.0.0.1"), 200);
  EXPECT_EQ(get_with_host("[::1]:8000"), 200);
  auto r = cli.Get("/version", {{"Host", "evil.example"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "host_not_allowed");

  server::ServerConfig listed = test_config();
  listed.allowed_hosts = {"my.box"};
  InProcessServer with_list(listed);
  httplib::Client cli2("127.0.0.1", with_list.port());
  EXPECT_EQ(cli2.Get("/version", {{"Host", "my.box:1"}})->status, 200);
  EXPECT_EQ(cli2.Get("/version", {{"Host", "other.box"}})->status, 403);

  server::ServerConfig keyed = test_config();
  keyed.api_key = "k";
  InProcessServer with_key(keyed);  // a rebinding page cannot know the key
  httplib::Client cli3("127.0.0.1", with_key.port());
  EXPECT_EQ(cli3.Get("/version", {{"Host", "evil.example"}})->status, 200);
}

TEST(HttpGuards, HostRulesForListenAddresses) {
  server::ServerConfig c;
  c.host = "0.0.0.0";
  EXPECT_TRUE(server::host_allowed("lancet.default.svc:8000", c));
  c.allowed_hosts = {"api.example"};
  EXPECT_FALSE(server::host_allowed("lancet.default.svc:8000", c));
  EXPECT_TRUE(server::host_allowed("API.example", c));
  EXPECT_TRUE(server::host_allowed("10.0.0.7:8000", c));
  c = server::ServerConfig{};
  c.host = "::1";
  EXPECT_TRUE(server::host_allowed("[::1]:8000", c));
  EXPECT_FALSE(server::host_allowed("rebind.example", c));
  EXPECT_TRUE(server::is_loopback_host("::1"));
  EXPECT_TRUE(server::is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(server::is_loopback_host("localhost"));
  EXPECT_FALSE(server::is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(server::is_loopback_host("::"));
}

TEST(HttpGuards, CorsPreflightForAllowedOriginsOnly) {
  server::ServerConfig cfg = test_config();
  cfg.api_key = "k";
  cfg.allowed_origins = {"http://app.example"};
  InProcessServer server(cfg);
  httplib::Client cli("127.0.0.1", server.port());
  const httplib::Headers preflight = {{"Origin", "http://app.example"},
                                      {"Access-Control-Request-Method", "POST"},
                                      {"Access-Control-Request-Headers", "authorization, content-type, x-stainless-os"}};
  auto r = cli.Options("/v1/chat/completions", preflight);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
  EXPECT_NE(r->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type, x-stainless-os");
  EXPECT_EQ(r->get_header_value("Vary"), "Origin");
  EXPECT_EQ(r->get_header_value_count("Access-Control-Allow-Origin"), 1u);
  // The actual request carries the header too, errors included (so the page can read them).
  r = cli.Post("/v1/completions", {{"Origin", "http://app.example"}}, "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
  // Another origin: refused, without CORS headers.
  r = cli.Options("/v1/chat/completions", {{"Origin", "http://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  // With a key, a cross-origin page cannot authenticate (the header needs the refused
  // preflight); such requests pass on to the key check and get no CORS header.
  r = cli.Post("/v1/completions", {{"Origin", "http://evil.example"}}, "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST(HttpGuards, CorsDefaultsToSameOriginAndStarAllowsAny) {
  InProcessServer same_only(test_config());
  httplib::Client cli("127.0.0.1", same_only.port());
  const std::string self = "http://127.0.0.1:" + std::to_string(same_only.port());
  auto r = cli.Get("/version", {{"Origin", self}});  // the chat page's own requests
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  r = cli.Options("/v1/models", {{"Origin", "http://app.example"}, {"Access-Control-Request-Method", "GET"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  // Without a key, a cross-origin "simple" request (no preflight) is refused too.
  r = cli.Post("/v1/completions", {{"Origin", "http://app.example"}}, "{\"prompt\": \"x\"}", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "origin_not_allowed");
  r = cli.Options("/v1/models");  // not a preflight
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_NE(r->get_header_value("Allow").find("POST"), std::string::npos);

  server::ServerConfig any = test_config();
  any.allowed_origins = {"*"};
  InProcessServer star(any);
  httplib::Client cli2("127.0.0.1", star.port());
  r = cli2.Options("/v1/models", {{"Origin", "http://anything.example"}, {"Access-Control-Request-Method", "GET"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(r->get_header_value_count("Access-Control-Allow-Origin"), 1u);
}

TEST(HttpGuards, ListFlagsAndOriginValidation) {
  auto a = server::parse_list_flag("--allowed-origins", "http://a.example, https://b.example:8443");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<std::string>{"http://a.example", "https://b.example:8443"}));
  auto b = server::parse_list_flag("--allowed-origins", R"(["*"])");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, std::vector<std::string>{"*"});
  EXPECT_FALSE(server::parse_list_flag("--allowed-origins", "[1]").ok());
  server::ServerConfig c;
  c.allowed_origins = {"http://a.example/path"};
  EXPECT_FALSE(c.validate().ok());
  c.allowed_origins = {"a.example"};
  EXPECT_FALSE(c.validate().ok());
  c.allowed_origins = {"*", "https://a.example:8443"};
  EXPECT_TRUE(c.validate().ok());
}

}  // namespace
}  // namespace lancet::testing
