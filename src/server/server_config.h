// Settings of the HTTP front end (the model's settings are runtime/RuntimeConfig). Filled by
// `lancet serve` from flags or a --config file; validate() rejects contradictions at start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "core/status.h"
#include "guard/guard_rules.h"
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
  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter answer (vLLM's
  // VLLM_ALLOW_RUNTIME_LORA_UPDATING); off, they refuse: a path on the server's disk is read.
  bool allow_runtime_lora_updating = false;
  int32_t listen_backlog = 1024;          // kernel queue of not yet accepted connections
  int32_t keep_alive_max = 1000;          // requests per connection (nginx's default)
  // Per-connection deadlines of the event loop (docs/SERVER.md): a request's header must
  // arrive within header_timeout_s of its first byte (of the connection's start, for the
  // first request), its body within body_timeout_s of the header; a keep-alive connection may
  // wait keep_alive_timeout_s for its next request (uvicorn's and so vLLM's default, 5 s).
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double keep_alive_timeout_s = 5;
  // Origins (scheme://host[:port]) whose browser pages may call the API; "*" = any. Empty =
  // same-origin only: no CORS headers, and cross-origin requests get 403.
  std::vector<std::string> allowed_origins;
  // Host header names accepted when no API key is set (DNS rebinding); "*" = any. Addresses,
  // localhost and the --host name are always accepted; see http_guards.h.
  std::vector<std::string> allowed_hosts;
  std::string version = "unknown";        // reported by GET /version
  RequestLimits limits;
  // The Files and Batch APIs (docs/API.md): where files are kept (made on first use), the
  // largest upload, and how many batch requests run at once (at the engine's batch priority).
  std::string batch_dir = "lancet-batches";
  size_t max_file_bytes = 200u << 20;
  int32_t batch_max_concurrency = 4;
  // --guard-rules: content rules for prompts and outputs (docs/GUARD.md); null = none.
  std::shared_ptr<const guard::GuardRules> guard_rules;

  Status validate() const;
};

// Parses a list flag: comma-separated ("a,b") or a JSON array ('["a", "b"]', vLLM's form).
StatusOr<std::vector<std::string>> parse_list_flag(const std::string& flag, const std::string& text);

}  // namespace lancet::server
