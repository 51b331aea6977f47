// Server-sent events framing for streamed completions: each JSON chunk is one
// "data: {...}\n\n" event, the stream ends with "data: [DONE]\n\n", and an error after the
// stream has started is sent as a data event holding the error envelope (headers are gone by
// then, so the status cannot change). Comment lines (": ...") keep idle connections alive.
#pragma once

#include <string>

#include "server/openai_json.h"

namespace lancet::server {

std::string sse_data(const Json& payload);
std::string sse_error(const ApiError& err);
std::string sse_done();
std::string sse_comment(const std::string& text);

}  // namespace lancet::server
