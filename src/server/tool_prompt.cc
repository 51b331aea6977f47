// Fallback rendering of tools for chat templates without tool support (see tool_prompt.h).
#include "server/tool_prompt.h"

#include <string>

namespace lancet::server {
namespace {

using ojson = nlohmann::ordered_json;

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// The system-message block that lists the tools (the same instruction Llama 3.1's template gives).
std::string tools_block(const ojson& tools) {
  std::string s =
      "You have access to the following functions. To call a function, respond only with a JSON object of the "
      "form {\"name\": function name, \"parameters\": dictionary of argument name and its value}. Do not use "
      "variables.\n";
  for (const auto& t : tools) s += "\n" + dump(t.contains("function") ? t["function"] : t);
  return s;
}

// An assistant turn's calls as the model writes them: {"name": N, "parameters": {...}}; ...
std::string calls_text(const ojson& calls) {
  std::string s;
  for (const auto& c : calls) {
    ojson call = ojson::object();
    call["name"] = c["function"]["name"];
    call["parameters"] = c["function"]["arguments"];
    if (!s.empty()) s += "; ";
    s += dump(call);
  }
  return s;
}

}  // namespace

bool template_handles_tools(const std::string& template_source) {
  return template_source.find("tools") != std::string::npos;
}

bool has_tool_turns(const ojson& messages) {
  for (const auto& m : messages)
    if (m.contains("tool_calls") || (m.contains("role") && m["role"] == "tool")) return true;
  return false;
}

ojson fallback_tool_messages(const ojson& messages, const ojson& tools) {
  ojson out = ojson::array();
  for (const auto& m : messages) {
    ojson msg = {{"role", m["role"]}, {"content", m.contains("content") ? m["content"] : ojson("")}};
    if (m.contains("tool_calls")) {
      std::string text = msg["content"].is_string() ? msg["content"].get<std::string>() : "";
      if (!text.empty()) text += "\n";
      msg["content"] = text + calls_text(m["tool_calls"]);
    }
    out.push_back(std::move(msg));
  }
  if (tools.is_array() && !tools.empty()) {
    const std::string block = tools_block(tools);
    if (!out.empty() && out[0]["role"] == "system") {
      const std::string sys = out[0]["content"].get<std::string>();
      out[0]["content"] = sys.empty() ? block : sys + "\n\n" + block;
    } else {
      out.insert(out.begin(), ojson{{"role", "system"}, {"content", block}});
    }
  }
  return out;
}

}  // namespace lancet::server
