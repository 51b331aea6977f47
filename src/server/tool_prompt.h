// Tool definitions and tool-call turns in the prompt. A chat template that handles tools
// (its source mentions `tools`, as Llama 3.1/3.2/3.3's do) gets the OpenAI `tools` list and
// the messages as they are (assistant `tool_calls` with `arguments` as objects, role "tool"
// messages with `tool_call_id`). A template that ignores tools (SmolLM2's ChatML) gets the
// fallback rendering of docs/API.md instead: the tools listed as JSON in a system message,
// each assistant call written as its Llama 3 JSON call, tool results as role "tool" content.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace lancet::server {

// True when the template source refers to a `tools` variable.
bool template_handles_tools(const std::string& template_source);

// messages: normalized chat messages (openai_json.h); tools: the request's list or null.
// Returns messages a template without tool support renders faithfully.
nlohmann::ordered_json fallback_tool_messages(const nlohmann::ordered_json& messages,
                                              const nlohmann::ordered_json& tools);

// Whether the messages carry anything tool-related (calls or tool results).
bool has_tool_turns(const nlohmann::ordered_json& messages);

}  // namespace lancet::server
