// Tool calling on /v1/chat/completions, the request side: the `tools`, `tool_choice` and
// `parallel_tool_calls` fields validated into ToolRequest, the assistant `tool_calls` and role
// "tool" messages normalized for the chat template, and the JSON schema that enforces a
// required or named tool call through the grammar-constrained sampler. Every problem is an
// ApiError (400) naming the field; nothing here touches the engine or HTTP.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace lancet::server {

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // the tool's schema; {"type": "object"} when none was given
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolRequest {
  std::vector<ToolSpec> tools;
  nlohmann::ordered_json tools_json = nullptr;  // the list as sent (what templates get); null: none
  ToolChoice choice = ToolChoice::kAuto;        // "auto" is the default when tools are given
  std::string named;                            // kNamed: the tool's name
  bool parallel = true;                         // parallel_tool_calls; false: at most one call

  bool given() const { return !tools.empty(); }
  // The output is parsed as tool calls (auto) or forced to be one (required, named).
  bool active() const { return given() && choice != ToolChoice::kNone; }
  bool enforced() const { return given() && (choice == ToolChoice::kRequired || choice == ToolChoice::kNamed); }
  std::vector<std::string> names() const;
};

// One call the model made, as the response reports it.
struct ToolCall {
  std::string id;         // "chatcmpl-tool-<hex>"
  std::string name;
  std::string arguments;  // a JSON object, serialized
};

// Parses tools / tool_choice / parallel_tool_calls from the request body (read in key order,
// so tool schemas keep the order they were written in).
std::optional<ApiError> parse_tool_request(const nlohmann::ordered_json& body, ToolRequest* out);

// An assistant message's `tool_calls` -> [{id, type, function: {name, arguments: object}}]
// (arguments parsed from their JSON string, as Llama 3.1's template wants them).
std::optional<ApiError> normalize_tool_calls(const nlohmann::json& calls, nlohmann::ordered_json* out);

// The schema a required or named tool_choice constrains the output to:
// {"name": const N, "parameters": <N's schema>}, anyOf over the tools for "required".
nlohmann::ordered_json tool_call_schema(const ToolRequest& r);

}  // namespace lancet::server
