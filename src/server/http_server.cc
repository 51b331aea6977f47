// HttpServer: routes and the cross-cutting rules every request passes through (header size,
// Content-Length, Host, CORS, drain, API key, concurrency limit, error envelopes). The socket
// and connection loop are HttpListener's, the header checks http_guards'; request bodies are
// parsed by openai_json; completions run in a CompletionSession.
#include "server/http_server.h"

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>

#include "core/logging.h"
#include "engine/request_checks.h"
#include "server/auth.h"
#include "server/batch_api.h"
#include "server/chat_page.h"
#include "server/client_connection.h"
#include "server/completion_session.h"
#include "server/documents_api.h"
#include "server/embedding_session.h"
#include "server/http_guards.h"
#include "server/http_listener.h"
#include "server/http_reply.h"
#include "server/openai_json.h"
#include "server/request_constraints.h"
#include "server/model_names.h"

namespace lancet::server {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The connection of the request this thread serves, to notice a client that went away.
ClientConnection client_of(const httplib::Request& req) {
  const int fd = HttpListener::current_socket();
  if (fd >= 0) return ClientConnection::of_socket(fd);
  return ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
}

// An answer given before the request body was read ends the connection: the unread bytes
// would otherwise be parsed as the next request.
void send_error_and_close(const httplib::Request& req, httplib::Response& res, const ApiError& err) {
  send_error(res, err);
  if (has_request_body(req)) res.set_header("Connection", "close");
}

// httplib's own test: exactly "chunked" (any case); it reads any other Transfer-Encoding as a
// body that lasts until the client closes.
bool is_chunked(const httplib::Request& req) {
  return strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") == 0;
}

// Reads the body through the content reader, not httplib's own path: that one caps
// form-encoded bodies (curl's default Content-Type) at 8 KiB and chunked ones not at all.
// Here every content type gets the --max-request-bytes limit, counted after decompression.
std::optional<ApiError> read_body(const httplib::Request& req, const httplib::ContentReader& reader, size_t max_bytes,
                                  std::string* body) {
  if (req.has_header("Transfer-Encoding") && !is_chunked(req))
    return bad_request("Transfer-Encoding must be chunked (or absent)", "", "invalid_transfer_encoding");
  // Without Content-Length or chunked framing a request has no body (RFC 9112 section 6.3);
  // httplib would read until the client closes.
  if (!has_request_body(req)) return std::nullopt;
  if (req.is_multipart_form_data()) return bad_request("the request body must be JSON, not multipart/form-data");
  bool too_large = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (body->size() + n > max_bytes) {
      too_large = true;
      return false;
    }
    body->append(data, n);
    return true;
  });
  if (too_large)
    return ApiError{413, "the request body is too large (the limit is " + std::to_string(max_bytes) + " bytes)",
                    "invalid_request_error", "", "request_too_large"};
  if (!ok) return bad_request("the request body could not be read (truncated, or bad chunked/compressed framing)");
  return std::nullopt;
}

}  // namespace

struct HttpServer::Impl {
  ServerConfig config;
  HttpListener http;
  std::atomic<ServingModel*> model{nullptr};
  std::atomic<const GuardModel*> guard_model{nullptr};
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

  // The Files and Batch APIs; made after the config, destroyed first (its worker uses the model).
  std::unique_ptr<BatchApi> batch_api;

  explicit Impl(ServerConfig c) : config(std::move(c)) {
    batch_api = std::make_unique<BatchApi>(&config, [this] { return model.load(); },
                                           [this] { return guard_model.load(); });
  }
  ~Impl() { batch_api.reset(); }
  // The body limit of a request: uploads to /v1/files get the file limit.
  size_t body_limit(const httplib::Request& req) const {
    return BatchApi::is_upload(req) ? BatchApi::upload_limit(config) : config.max_body_bytes;
  }
  void install_batch_routes();
  void install_routes();
  void install_handlers();
  httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res);
  using BodyHandler = std::function<void(const httplib::Request&, const std::string&, httplib::Response&)>;
  // Registers a POST route whose handler gets the body read by read_body().
  void post_with_body(const char* path, BodyHandler handler);
  void handle_completion(const httplib::Request& req, const std::string& body, httplib::Response& res, ApiKind kind);
  void handle_embeddings(const httplib::Request& req, const std::string& body, httplib::Response& res);
  void handle_tokenize(const std::string& body, httplib::Response& res);
  void handle_detokenize(const std::string& body, httplib::Response& res);
  // POST /v1/load_lora_adapter (load) and /v1/unload_lora_adapter.
  void handle_lora_update(const std::string& body, httplib::Response& res, bool load);
  void handle_documents(const httplib::Request& req, const std::string& body, httplib::Response& res);
  ServingModel* ready_model(httplib::Response& res);
};

ServingModel* HttpServer::Impl::ready_model(httplib::Response& res) {
  ServingModel* m = model.load();
  if (!m) send_error(res, server_error(503, "the model is still loading", "service_unavailable"));
  return m;
}

void HttpServer::Impl::handle_completion(const httplib::Request& req, const std::string& body, httplib::Response& res,
                                         ApiKind kind) {
  ServingModel* m = ready_model(res);
  if (!m) return;
  ApiRequest api;
  auto err = kind == ApiKind::kChat ? parse_chat_request(body, config.limits, &api)
                                    : parse_completion_request(body, config.limits, &api);
  if (err) return send_error(res, *err);
  if (auto e = resolve_model(*m, api.model, &api.lora)) return send_error(res, *e);
  if (auto e = attach_constraints(m, &api)) return send_error(res, *e);
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
  const ClientConnection conn = client_of(req);
  if (config.guard_rules) session->set_guard(config.guard_rules.get());
  if (const GuardModel* gm = guard_model.load()) session->set_guard_model(gm);
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

void HttpServer::Impl::handle_embeddings(const httplib::Request& req, const std::string& body, httplib::Response& res) {
  ServingModel* m = ready_model(res);
  if (!m) return;
  EmbeddingRequest er;
  if (auto e = parse_embedding_request(body, config.limits, &er)) return send_error(res, *e);
  if (auto e = resolve_model(*m, er.model, &er.lora)) return send_error(res, *e);
  if (in_flight.fetch_add(1) >= config.max_concurrent_requests) {
    in_flight.fetch_sub(1);
    return send_error(res, server_error(429, "the server is at its concurrency limit; retry later",
                                        "rate_limit_error", "too_many_requests"));
  }
  Slot slot(&in_flight);
  EmbeddingSession session(m, std::move(er), config.request_timeout_s);
  const ClientConnection conn = client_of(req);
  if (conn.found()) session.set_client_gone([conn] { return conn.closed(); });
  Json out;
  if (auto e = session.run(&out)) return send_error(res, *e);
  send_json(res, out);
}

void HttpServer::Impl::handle_documents(const httplib::Request& req, const std::string& body, httplib::Response& res) {
  ServingModel* m = ready_model(res);
  if (!m) return;
  if (in_flight.fetch_add(1) >= config.max_concurrent_requests) {
    in_flight.fetch_sub(1);
    return send_error(res, server_error(429, "the server is at its concurrency limit; retry later",
                                        "rate_limit_error", "too_many_requests"));
  }
  Slot slot(&in_flight);
  DocumentsOptions opt;
  opt.timeout_s = config.request_timeout_s;
  const ClientConnection conn = client_of(req);
  if (conn.found()) opt.client_gone = [conn] { return conn.closed(); };
  Json out;
  if (auto e = answer_document(m, body, opt, &out)) return send_error(res, *e);
  send_json(res, out);
}

void HttpServer::Impl::handle_tokenize(const std::string& body, httplib::Response& res) {
  ServingModel* m = ready_model(res);
  if (!m) return;
  TokenizeRequest tr;
  if (auto e = parse_tokenize_request(body, config.limits, &tr)) return send_error(res, *e);
  if (!m->has_tokenizer()) return send_error(res, bad_request("this model has no tokenizer"));
  const bool tools = !tr.prompt && (!tr.tools.is_null() || has_tool_turns(tr.messages));
  StatusOr<std::vector<int32_t>> ids =
      tr.prompt ? m->encode(*tr.prompt, tr.add_special_tokens)
      : tools   ? m->encode_chat_with_tools(tr.messages, tr.tools, {tr.add_generation_prompt, tr.continue_final_message})
                : m->encode_chat(tr.messages, {tr.add_generation_prompt, tr.continue_final_message});
  if (!ids.ok()) return send_error(res, bad_request(ids.status().message(), tr.prompt ? "prompt" : "messages"));
  Json out;
  out["count"] = ids->size();
  out["max_model_len"] = m->max_model_len();
  out["tokens"] = *ids;
  send_json(res, out);
}

void HttpServer::Impl::handle_lora_update(const std::string& body, httplib::Response& res, bool load) {
  ServingModel* m = ready_model(res);
  if (!m) return;
  if (!config.allow_runtime_lora_updating)
    return send_error(res, bad_request("loading and unloading LoRA adapters at run time is off (start the server with "
                                       "--allow-runtime-lora-updating)",
                                       "", "lora_updating_disabled"));
  std::string name, path;
  if (auto e = parse_lora_adapter_request(body, config.limits, load, &name, &path)) return send_error(res, *e);
  const Status st = load ? m->load_adapter(name, path) : m->unload_adapter(name);
  if (!st.ok()) {
    const int code = st.code() == StatusCode::kNotFound && !load ? 404 : 400;
    return send_error(res, ApiError{code, st.message(), "invalid_request_error", "lora_name",
                                    code == 404 ? "lora_not_found" : ""});
  }
  res.set_content("Success: LoRA adapter '" + name + (load ? "' added successfully." : "' removed successfully."),
                  "text/plain");
}

void HttpServer::Impl::handle_detokenize(const std::string& body, httplib::Response& res) {
  ServingModel* m = ready_model(res);
  if (!m) return;
  std::vector<int32_t> ids;
  if (auto e = parse_detokenize_request(body, config.limits, &ids)) return send_error(res, *e);
  if (!m->has_tokenizer()) return send_error(res, bad_request("this model has no tokenizer"));
  if (const Status st = check_token_ids(ids, m->vocab_size()); !st.ok())
    return send_error(res, bad_request(st.message(), "tokens"));
  send_json(res, Json{{"prompt", m->decode(ids)}});
}

// The rules every request passes before its route, in order: header size, Content-Length
// (before any body byte is read), Host (DNS rebinding), Origin (CORS), drain, API key.
httplib::Server::HandlerResponse HttpServer::Impl::pre_route(const httplib::Request& req, httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  size_t header_bytes = 0;
  for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
  if (header_bytes > config.max_header_bytes) {
    send_error_and_close(req, res, ApiError{431, "the request headers are too large", "invalid_request_error", "",
                                            "headers_too_large"});
    return HR::Handled;
  }
  if (auto err = check_content_length(req, body_limit(req))) {
    send_error(res, *err);
    res.set_header("Connection", "close");
    return HR::Handled;
  }
  if (!host_allowed(req.get_header_value("Host"), config)) {
    send_error_and_close(req, res, ApiError{403, "the Host header names a host this server does not answer for "
                                                 "(see --allowed-hosts)", "invalid_request_error", "",
                                            "host_not_allowed"});
    return HR::Handled;
  }
  // A page of another origin can send "simple" requests (text/plain POSTs) without a preflight;
  // without an API key nothing else would stop them. With a key they cannot authenticate
  // (the header needs a preflight), so only preflights are refused, and a proxy that rewrites
  // Host does not break the chat page.
  if (!origin_allowed(req.get_header_value("Origin"), req.get_header_value("Host"), config) &&
      (config.api_key.empty() || req.method == "OPTIONS")) {
    send_error_and_close(req, res, ApiError{403, "requests from this origin are not allowed (see --allowed-origins)",
                                            "invalid_request_error", "", "origin_not_allowed"});
    return HR::Handled;
  }
  add_cors_headers(req, config, res);
  // Preflights carry no credentials, so they are answered before the key check.
  if (req.method == "OPTIONS") {
    answer_options(req, config, res);
    if (has_request_body(req)) res.set_header("Connection", "close");
    return HR::Handled;
  }
  const bool api = starts_with(req.path, "/v1/");
  const bool work = api || req.path == "/tokenize" || req.path == "/detokenize";
  if (work && draining.load()) {
    send_error_and_close(req, res, server_error(503, "the server is shutting down", "service_unavailable"));
    return HR::Handled;
  }
  if (api && !authorized(req.get_header_value("Authorization"), config.api_key)) {
    send_error_and_close(req, res,
                         ApiError{401, "invalid or missing API key", "authentication_error", "", "invalid_api_key"});
    return HR::Handled;
  }
  // httplib reads no body for GET and HEAD; one that came anyway must not become a request.
  if ((req.method == "GET" || req.method == "HEAD") && has_request_body(req)) res.set_header("Connection", "close");
  return HR::Unhandled;
}

void HttpServer::Impl::post_with_body(const char* path, BodyHandler handler) {
  http.Post(path, [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                                       const httplib::ContentReader& reader) {
    std::string body;
    if (auto err = read_body(req, reader, config.max_body_bytes, &body)) {
      send_error(res, *err);
      res.set_header("Connection", "close");
      return;
    }
    handler(req, body, res);
  });
}

// The hooks around every route: checks before it, the envelope for httplib's own errors and
// for exceptions, and the error counter.
void HttpServer::Impl::install_handlers() {
  http.set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { return pre_route(req, res); });
  // "Expect: 100-continue" is answered before routing: refuse a bad Content-Length there too,
  // so the client does not send a body that will be refused.
  http.set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    auto err = check_content_length(req, body_limit(req));
    if (!err) return 100;
    send_error(res, *err);
    res.set_header("Connection", "close");
    return err->status;
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
}

void HttpServer::Impl::install_routes() {
  // The per-route limits are checked in pre_route and read_body; httplib's own is the largest.
  // (Worker threads and the connection deadlines are the listener's: see HttpServer::bind.)
  http.set_payload_max_length(std::max(config.max_body_bytes, BatchApi::upload_limit(config)));
  http.set_loop_answer_counter([this](int status) { metrics.count_http_error(status); });

  install_handlers();

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
    if (!m) return;
    std::vector<std::pair<std::string, std::string>> adapters;
    for (const ServingModel::Adapter& a : m->adapters()) adapters.emplace_back(a.name, a.path);
    send_json(res, models_json(m->name(), m->max_model_len(), created, adapters));
  });
  post_with_body("/v1/load_lora_adapter", [this](const httplib::Request&, const std::string& body,
                                                 httplib::Response& res) { handle_lora_update(body, res, true); });
  post_with_body("/v1/unload_lora_adapter", [this](const httplib::Request&, const std::string& body,
                                                   httplib::Response& res) { handle_lora_update(body, res, false); });
  post_with_body("/v1/chat/completions", [this](const httplib::Request& req, const std::string& body,
                                                httplib::Response& res) { handle_completion(req, body, res, ApiKind::kChat); });
  post_with_body("/v1/completions",
                 [this](const httplib::Request& req, const std::string& body, httplib::Response& res) {
                   handle_completion(req, body, res, ApiKind::kCompletion);
                 });
  post_with_body("/v1/embeddings", [this](const httplib::Request& req, const std::string& body,
                                          httplib::Response& res) { handle_embeddings(req, body, res); });
  post_with_body("/tokenize", [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
    handle_tokenize(body, res);
  });
  post_with_body("/detokenize", [this](const httplib::Request&, const std::string& body, httplib::Response& res) {
    handle_detokenize(body, res);
  });
  post_with_body("/v1/lancet/documents", [this](const httplib::Request& req, const std::string& body,
                                                 httplib::Response& res) { handle_documents(req, body, res); });
  install_batch_routes();
  if (config.chat_page) {
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(chat_page_html(), "text/html; charset=utf-8");
    });
  }
}

void HttpServer::Impl::install_batch_routes() {
  BatchApi* api = batch_api.get();
  http.Post("/v1/files", [api](const httplib::Request& req, httplib::Response& res,
                               const httplib::ContentReader& reader) { api->upload_file(req, res, reader); });
  http.Get("/v1/files", [api](const httplib::Request& req, httplib::Response& res) { api->list_files(req, res); });
  http.Get(R"(/v1/files/([^/]+))",
           [api](const httplib::Request& req, httplib::Response& res) { api->get_file(req.matches[1], res); });
  http.Get(R"(/v1/files/([^/]+)/content)",
           [api](const httplib::Request& req, httplib::Response& res) { api->file_content(req.matches[1], res); });
  http.Delete(R"(/v1/files/([^/]+))",
              [api](const httplib::Request& req, httplib::Response& res) { api->delete_file(req.matches[1], res); });
  post_with_body("/v1/batches", [api](const httplib::Request&, const std::string& body, httplib::Response& res) {
    api->create_batch(body, res);
  });
  http.Get("/v1/batches", [api](const httplib::Request& req, httplib::Response& res) { api->list_batches(req, res); });
  http.Get(R"(/v1/batches/([^/]+))",
           [api](const httplib::Request& req, httplib::Response& res) { api->get_batch(req.matches[1], res); });
  post_with_body(R"(/v1/batches/([^/]+)/cancel)",
                 [api](const httplib::Request& req, const std::string&, httplib::Response& res) {
                   api->cancel_batch(req.matches[1], res);
                 });
}

HttpServer::HttpServer(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  impl_->install_routes();
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  const ServerConfig& c = impl_->config;
  RETURN_IF_ERROR(c.validate());
  ListenConfig lc;
  lc.host = c.host;
  lc.port = c.port;
  lc.backlog = c.listen_backlog;
  lc.keep_alive_max = static_cast<size_t>(c.keep_alive_max);
  lc.header_timeout_s = c.header_timeout_s;
  lc.body_timeout_s = c.body_timeout_s;
  lc.keep_alive_timeout_s = c.keep_alive_timeout_s;
  lc.max_header_bytes = c.max_header_bytes;
  lc.max_loop_body_bytes = c.max_body_bytes;
  // Streams hold a worker each; the rest serve the short requests next to them.
  lc.worker_threads = c.http_threads > 0 ? c.http_threads : c.max_concurrent_requests + 16;
  // Must answer while every worker is busy with a stream.
  lc.reserved_paths = {"/health", "/metrics"};
  StatusOr<int> port = impl_->http.bind_socket(lc);
  if (!port.ok()) return port.status();
  impl_->bound_port = *port;
  return OkStatus();
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::run() { impl_->http.serve(); }

void HttpServer::set_model(ServingModel* model) { impl_->model.store(model); }

void HttpServer::set_guard_model(const GuardModel* guard) { impl_->guard_model.store(guard); }

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
  impl_->http.close();
  impl_->batch_api->shutdown();
}

int64_t HttpServer::in_flight() const { return impl_->in_flight.load(); }

Metrics& HttpServer::metrics() { return impl_->metrics; }

}  // namespace lancet::server
