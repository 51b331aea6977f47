// SSE framing (see sse.h).
#include "server/sse.h"

namespace lancet::server {

std::string sse_data(const Json& payload) { return "data: " + dump_json(payload) + "\n\n"; }

std::string sse_error(const ApiError& err) { return sse_data(error_json(err)); }

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_comment(const std::string& text) {
  std::string out = ": ";
  for (char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
  return out + "\n\n";
}

}  // namespace lancet::server
