// HttpServer: routes and the cross-cutting rules every request passes through (header size,
// drain, API key, concurrency limit, error envelopes). Request bodies are handled by
// openai_json; completions run in a CompletionSession.
#include "server/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>

#include "core/logging.h"
#include "server/auth.h"
#include "server/chat_page.h"
#include "server/client_connection.h"
#include "server/completion_session.h"
#include "server/httplib_include.h"
#include "server/openai_json.h"
#include "server/process_sockets.h"

namespace lancet::server {
namespace {

void send_error(httplib::Response& res, const ApiError& err) {
  res.status = err.status;
  res.set_content(dump_json(error_json(err)), "application/json");
}

void send_json(httplib::Response& res, const Json& j) { res.set_content(dump_json(j), "application/json"); }

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// cpp-httplib 0.11 listens with a backlog of 5: a burst of clients (64 streams connecting at
// once) overflows the accept queue, and the kernel drops their SYNs or handshakes, which costs
// each of them a retransmit (a second or more). Listening again on the bound socket raises the
// backlog (Linux keeps the socket and its queue).
void widen_listen_backlog(int port) {
  const int fd = find_own_socket([&](int fd) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    std::string host;
    int bound = -1;
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening != 0 &&
           socket_address(fd, /*peer=*/false, &host, &bound) && bound == port;
  });
  if (fd < 0 || ::listen(fd, SOMAXCONN) != 0)
    LOG_WARN("cannot raise the listen backlog of port " << port << "; bursts of connections may wait for retransmits");
}

}  // namespace

struct HttpServer::Impl {
  ServerConfig config;
  httplib::Server http;
  std::atomic<ServingModel*> model{nullptr};
  std::atomic<bool> draining{false};
  std::atomic<int64_t> in_flight{0};
  Metrics metrics;
  int bound_port = -1;
  int64_t created = static_cast<int64_t>(std::time(nullptr));

  // Holds a slot of the concurrency limit until destroyed.
  struct Slot {
    explicit Slot(std::atomic<int64_t>* c) : counter(c) {}
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { counter->fetch_sub(1); }
    std::atomic<int64_t>* counter;
  };
  // A streaming response's state; members are destroyed in reverse order, so the session
  // (which cancels the engine request) goes before the slot is released.
  struct Streaming {
    std::shared_ptr<Slot> slot;
    std::unique_ptr<CompletionSession> session;
  };

  explicit Impl(ServerConfig c) : config(std::move(c)) {}
  void install_routes();
  void handle_completion(const httplib::Request& req, httplib::Response& res, ApiKind kind);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res);
  void handle_detokenize(const httplib::Request& req, httplib::Response& res);
  ServingModel* ready_model(httplib::Response& res);
};

ServingModel* HttpServer::Impl::ready_model(httplib::Response& res) {
  ServingModel* m = model.load();
  if (!m) send_error(res, server_error(503, "the model is still loading", "service_unavailable"));
  return m;
}

void HttpServer::Impl::handle_completion(const httplib::Request& req, httplib::Response& res, ApiKind kind) {
  ServingModel* m = ready_model(res);
  if (!m) return;
  ApiRequest api;
  auto err = kind == ApiKind::kChat ? parse_chat_request(req.body, config.limits, &api)
                                    : parse_completion_request(req.body, config.limits, &api);
  if (err) return send_error(res, *err);
  if (!api.model.empty() && api.model != m->name())
    return send_error(res, not_found("The model `" + api.model.substr(0, 256) + "` does not exist.", "model",
                                     "model_not_found"));
  if (in_flight.fetch_add(1) >= config.max_concurrent_requests) {
    in_flight.fetch_sub(1);
    return send_error(res, server_error(429, "the server is at its concurrency limit; retry later",
                                        "rate_limit_error", "too_many_requests"));
  }
  auto slot = std::make_shared<Slot>(&in_flight);
  const bool stream = api.stream;
  auto session = std::make_unique<CompletionSession>(m, &metrics, std::move(api), config.request_timeout_s);
  // The socket stays this request's until the response is written (streamed or not), so the
  // session may check it whenever it waits.
  const ClientConnection conn =
      ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (conn.found()) session->set_client_gone([conn] { return conn.closed(); });
  if (auto e = session->submit()) return send_error(res, *e);
  if (!stream) {
    Json out;
    if (auto e = session->collect(&out)) return send_error(res, *e);
    return send_json(res, out);
  }
  auto state = std::make_shared<Streaming>(Streaming{std::move(slot), std::move(session)});
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink& sink) {
        const bool ok = state->session->stream([&](const std::string& frame) {
          return sink.write(frame.data(), frame.size());
        });
        if (ok) sink.done();
        return ok;
      },
      [state](bool) {});
}

void HttpServer::Impl::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  ServingModel* m = ready_model(res);
  if (!m) return;
  TokenizeRequest tr;
  if (auto e = parse_tokenize_request(req.body, config.limits, &tr)) return send_error(res, *e);
  if (!m->has_tokenizer()) return send_error(res, bad_request("this model has no tokenizer"));
  StatusOr<std::vector<int32_t>> ids =
      tr.prompt ? m->encode(*tr.prompt, tr.add_special_tokens) : m->encode_chat(tr.messages, tr.add_generation_prompt);
  if (!ids.ok()) return send_error(res, bad_request(ids.status().message(), tr.prompt ? "prompt" : "messages"));
  Json out;
  out["count"] = ids->size();
  out["max_model_len"] = m->max_model_len();
  out["tokens"] = *ids;
  send_json(res, out);
}

void HttpServer::Impl::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
  ServingModel* m = ready_model(res);
  if (!m) return;
  std::vector<int32_t> ids;
  if (auto e = parse_detokenize_request(req.body, config.limits, &ids)) return send_error(res, *e);
  if (!m->has_tokenizer()) return send_error(res, bad_request("this model has no tokenizer"));
  for (int32_t t : ids)
    if (t >= m->vocab_size())
      return send_error(res, bad_request("token id " + std::to_string(t) + " is outside the vocabulary", "tokens"));
  send_json(res, Json{{"prompt", m->decode(ids)}});
}

void HttpServer::Impl::install_routes() {
  const int threads = config.http_threads > 0 ? config.http_threads : config.max_concurrent_requests + 16;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(config.max_body_bytes);
  http.set_read_timeout(30);
  http.set_write_timeout(10);
  http.set_keep_alive_timeout(5);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    size_t header_bytes = 0;
    for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
    if (header_bytes > config.max_header_bytes) {
      send_error(res, ApiError{431, "the request headers are too large", "invalid_request_error", "", ""});
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool api = starts_with(req.path, "/v1/");
    const bool work = api || req.path == "/tokenize" || req.path == "/detokenize";
    if (work && draining.load()) {
      send_error(res, server_error(503, "the server is shutting down", "service_unavailable"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (api && !authorized(req.get_header_value("Authorization"), config.api_key)) {
      send_error(res, ApiError{401, "invalid or missing API key", "authentication_error", "", "invalid_api_key"});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Status codes that httplib sets itself (404 no route, 413 body too large, 400 unparsable
  // request) get the envelope too; responses that already have a body keep it.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                 httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = res.status == 404   ? "no route for " + req.method + " " + req.path.substr(0, 256)
                      : res.status == 413 ? std::string("the request body is too large")
                                          : std::string("bad request");
    send_error(res, ApiError{res.status, msg, res.status == 404 ? "not_found_error" : "invalid_request_error", "", ""});
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    LOG_ERROR("request failed: " << what);
    send_error(res, server_error(500, "internal error: " + what, "internal_error"));
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (res.status >= 400) metrics.count_http_error(res.status);
    LOG_DEBUG(req.method << " " << req.path << " -> " << res.status);
  });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!model.load() || draining.load()) {
      res.status = 503;
      res.set_content(draining.load() ? "draining\n" : "loading\n", "text/plain");
      return;
    }
    res.set_content("", "text/plain");
  });
  http.Get("/version", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, Json{{"version", config.version}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    ServingModel* m = model.load();
    EngineStats st = m ? m->engine().stats() : EngineStats{};
    res.set_content(metrics.render(m ? m->name() : "", st, in_flight.load()), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    ServingModel* m = ready_model(res);
    if (m) send_json(res, models_json(m->name(), m->max_model_len(), created));
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, ApiKind::kChat);
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, ApiKind::kCompletion);
  });
  http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { handle_tokenize(req, res); });
  http.Post("/detokenize",
            [this](const httplib::Request& req, httplib::Response& res) { handle_detokenize(req, res); });
  if (config.chat_page) {
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(chat_page_html(), "text/html; charset=utf-8");
    });
  }
}

HttpServer::HttpServer(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  impl_->install_routes();
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  RETURN_IF_ERROR(impl_->config.validate());
  if (impl_->config.port == 0) {
    impl_->bound_port = impl_->http.bind_to_any_port(impl_->config.host);
    if (impl_->bound_port < 0) return IoError("cannot listen on " + impl_->config.host);
  } else {
    if (!impl_->http.bind_to_port(impl_->config.host, impl_->config.port))
      return IoError("cannot listen on " + impl_->config.host + ":" + std::to_string(impl_->config.port) +
                     " (in use, or not an address of this machine)");
    impl_->bound_port = impl_->config.port;
  }
  widen_listen_backlog(impl_->bound_port);
  return OkStatus();
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::run() { impl_->http.listen_after_bind(); }

void HttpServer::set_model(ServingModel* model) { impl_->model.store(model); }

void HttpServer::begin_drain() { impl_->draining.store(true); }

bool HttpServer::wait_idle(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (impl_->in_flight.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void HttpServer::stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

int64_t HttpServer::in_flight() const { return impl_->in_flight.load(); }

Metrics& HttpServer::metrics() { return impl_->metrics; }

}  // namespace lancet::server
