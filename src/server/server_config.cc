// ServerConfig validation: every message names the flag.
#include "server/server_config.h"

namespace lancet::server {

Status ServerConfig::validate() const {
  if (host.empty()) return InvalidArgument("--host must not be empty");
  if (port < 0 || port > 65535) return InvalidArgument("--port must be in [0, 65535]");
  // Bounded so that the deadline (arrival + timeout) stays within the clock's range.
  if (!(request_timeout_s >= 0 && request_timeout_s <= 365 * 86400.0))
    return InvalidArgument("--timeout must be in [0, 31536000] seconds (0 = none)");
  if (drain_timeout_s < 0) return InvalidArgument("--drain-timeout must not be negative");
  if (max_body_bytes < 1024) return InvalidArgument("--max-request-bytes must be at least 1024");
  if (max_header_bytes < 1024) return InvalidArgument("--max-header-bytes must be at least 1024");
  if (max_concurrent_requests < 1 || max_concurrent_requests > 100000)
    return InvalidArgument("--max-concurrent-requests must be in [1, 100000]");
  if (http_threads < 0 || http_threads > 100000) return InvalidArgument("--http-threads must be in [0, 100000]");
  if (http_threads > 0 && http_threads <= max_concurrent_requests)
    return InvalidArgument("--http-threads must exceed --max-concurrent-requests (streams hold a thread each)");
  if (limits.max_logprobs < 0) return InvalidArgument("--max-logprobs must not be negative");
  return OkStatus();
}

}  // namespace lancet::server
