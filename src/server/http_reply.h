// JSON answers of the HTTP handlers: a body, or an OpenAI-style error envelope with its status.
#pragma once

#include "server/httplib_include.h"
#include "server/openai_json.h"

namespace lancet::server {

inline void send_json(httplib::Response& res, const Json& j) { res.set_content(dump_json(j), "application/json"); }

inline void send_error(httplib::Response& res, const ApiError& err) {
  res.status = err.status;
  res.set_content(dump_json(error_json(err)), "application/json");
}

}  // namespace lancet::server
