// Errors raised while compiling or rendering a chat template, with the source position.
// The interpreter unwinds its deep recursion (nested expressions, macros) with this exception;
// chat_template.cc turns it into a Status at the public boundary, so no exception leaves the
// library.
#pragma once

#include <stdexcept>
#include <string>

#include "core/status.h"

namespace lancet::jinja {

struct SourcePos {
  int line = 0;  // 1-based; 0 = not known yet (filled in by the evaluating node)
  int col = 0;
};

class TemplateError : public std::runtime_error {
 public:
  TemplateError(StatusCode code, SourcePos pos, const std::string& msg)
      : std::runtime_error(msg), code(code), pos(pos) {}
  StatusCode code;
  SourcePos pos;
};

// Bad template or bad use of a value: InvalidArgument.
[[noreturn]] inline void fail(const std::string& msg, SourcePos pos = {}) {
  throw TemplateError(StatusCode::kInvalidArgument, pos, msg);
}
// A sandbox limit (operations, output size, recursion): ResourceExhausted.
[[noreturn]] inline void fail_limit(const std::string& msg, SourcePos pos = {}) {
  throw TemplateError(StatusCode::kResourceExhausted, pos, msg);
}

}  // namespace lancet::jinja
