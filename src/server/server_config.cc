// ServerConfig validation: every message names the flag.
#include "server/server_config.h"

#include <nlohmann/json.hpp>

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
  if (listen_backlog < 1 || listen_backlog > 65535) return InvalidArgument("--listen-backlog must be in [1, 65535]");
  if (keep_alive_max < 1) return InvalidArgument("--keep-alive-max-requests must be at least 1");
  const auto seconds_ok = [](double s) { return s > 0 && s <= 86400; };
  if (!seconds_ok(header_timeout_s)) return InvalidArgument("--header-timeout must be in (0, 86400] seconds");
  if (!seconds_ok(body_timeout_s)) return InvalidArgument("--body-timeout must be in (0, 86400] seconds");
  if (!seconds_ok(keep_alive_timeout_s)) return InvalidArgument("--keep-alive-timeout must be in (0, 86400] seconds");
  for (const std::string& o : allowed_origins) {
    const bool url = o.rfind("http://", 0) == 0 || o.rfind("https://", 0) == 0;
    const size_t host_at = o.find("://") + 3;
    if (o != "*" && (!url || o.size() == host_at || o.find('/', host_at) != std::string::npos))
      return InvalidArgument("--allowed-origins: '" + o + "' is not an origin (scheme://host[:port], or *)");
  }
  for (const std::string& h : allowed_hosts)
    if (h.empty() || h.find_first_of("/ ") != std::string::npos)
      return InvalidArgument("--allowed-hosts: '" + h + "' is not a host name");
  if (batch_dir.empty()) return InvalidArgument("--batch-dir must not be empty");
  if (max_file_bytes < 1) return InvalidArgument("--max-file-bytes must be at least 1");
  if (batch_max_concurrency < 1 || batch_max_concurrency > 4096)
    return InvalidArgument("--batch-max-concurrency must be in [1, 4096]");
  if (limits.max_logprobs < 0) return InvalidArgument("--max-logprobs must not be negative");
  return OkStatus();
}

StatusOr<std::vector<std::string>> parse_list_flag(const std::string& flag, const std::string& text) {
  std::vector<std::string> out;
  if (!text.empty() && text.front() == '[') {
    const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_array()) return InvalidArgument(flag + ": not a JSON array of strings: " + text);
    for (const auto& v : j) {
      if (!v.is_string()) return InvalidArgument(flag + ": not a JSON array of strings: " + text);
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

}  // namespace lancet::server
