// Settings of the HTTP front end (the model's settings are engine/RuntimeConfig). Filled by
// `lancet serve` from flags or a --config file; validate() rejects contradictions at start.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "server/openai_json.h"

namespace lancet::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                        // 0 = any free port (tests)
  std::string api_key;                    // "" = no auth
  double request_timeout_s = 0;           // per completion request; 0 = none
  double drain_timeout_s = 30;            // SIGTERM: how long in-flight requests may finish
  size_t max_body_bytes = 8u << 20;       // larger bodies get 413
  size_t max_header_bytes = 16u << 10;    // larger header sections get 431
  int32_t max_concurrent_requests = 256;  // completion requests in flight; more get 429
  int32_t http_threads = 0;               // 0 = max_concurrent_requests + 16
  bool chat_page = true;                  // serve the chat page at GET /
  std::string version = "unknown";        // reported by GET /version
  RequestLimits limits;

  Status validate() const;
};

}  // namespace lancet::server
