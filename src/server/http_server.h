// The OpenAI-compatible HTTP server (cpp-httplib underneath): routes, auth, limits, error
// envelopes, streaming, /metrics, /health, the chat page, and the drain used for graceful
// shutdown. It starts answering before the model is loaded (/health says 503 until
// set_model()), so an orchestrator can tell "loading" from "dead".
//
//   HttpServer server(config);
//   RETURN_IF_ERROR(server.bind());
//   std::thread t([&] { server.run(); });
//   server.set_model(model.get());
//   ...  // on SIGTERM:
//   server.begin_drain(); server.wait_idle(config.drain_timeout_s); server.stop(); t.join();
#pragma once

#include <memory>

#include "core/status.h"
#include "server/guard_model.h"
#include "server/metrics.h"
#include "server/server_config.h"
#include "server/serving_model.h"

namespace lancet::server {

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket (port 0 picks a free one; port() then says which).
  Status bind();
  int port() const;
  // Serves until stop(); call from a thread of its own.
  void run();
  // The model to serve (must outlive the server); null = still loading (503).
  void set_model(ServingModel* model);
  // The guard model (--guard-model) every completion's prompts go through after the content
  // rules; set before set_model (null: none). Must outlive the server's requests.
  void set_guard_model(const GuardModel* guard);
  // Graceful shutdown, step 1: /health turns 503 and new requests get 503.
  void begin_drain();
  // Step 2: waits until no completion request is in flight; false on timeout.
  bool wait_idle(double timeout_s);
  // Step 3: closes the socket and ends run().
  void stop();

  int64_t in_flight() const;
  Metrics& metrics();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lancet::server
