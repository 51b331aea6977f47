// Tool calls in a model's output, in the Llama 3.1/3.2/3.3 JSON format: the whole output is
// `{"name": "fn", "parameters": {...}}`, optionally after `<|python_tag|>`, several calls
// separated by ';' ("arguments" is accepted for "parameters"). Output that does not parse
// that way, or that calls a function the request did not offer, is plain content.
// ToolCallStream decides, while a stream is running, whether text may be released as
// content or must be held until the output can be parsed as a whole.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace lancet::server {

// The calls in `text` (ids left empty), or nullopt when it is not wholly tool calls to `names`.
std::optional<std::vector<ToolCall>> parse_tool_calls(std::string_view text, const std::vector<std::string>& names);

// Streaming in tool mode. feed() takes each piece of released output and returns what may
// go to the client as content now: nothing while the output could still be a tool call
// (it starts with '{' or <|python_tag|>, or is blank so far), everything once it cannot.
// With `enforced` (required / named tool_choice) the output is a call by construction and is
// always held. finish() returns the held text (for when the whole output is not a call).
class ToolCallStream {
 public:
  explicit ToolCallStream(bool enforced) : enforced_(enforced) {}
  std::string feed(std::string_view piece);
  std::string finish();
  bool holding() const { return !released_; }

 private:
  bool enforced_;
  bool released_ = false;
  std::string held_;
};

// Streaming a required or named call's arguments as they are sampled. The constrained output
// is `{"name": "N", "parameters": ARGS}` (with what blanks the grammar allows); feed() returns
// the name once it is complete, then each new piece of ARGS, holding back a trailing run of
// '}' and blanks (it may close the outer object). finish() returns the rest of ARGS, without
// the outer '}'.
class CallArgumentsStream {
 public:
  struct Piece {
    bool name_ready = false;  // true once: `name` is the call's name
    std::string name;
    std::string arguments;  // the next fragment of ARGS ("" when none)
  };
  Piece feed(std::string_view piece);
  std::string finish();
  bool started() const { return args_start_ != std::string::npos; }

 private:
  std::string text_;
  size_t args_start_ = std::string::npos;  // where ARGS begins in text_
  size_t sent_ = 0;                        // bytes of ARGS returned
};

}  // namespace lancet::server
