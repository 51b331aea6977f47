// Tool calling, request side (see tool_calls.h): validation of tools and tool_choice, the
// normalization of assistant tool calls, and the enforcing schema.
#include "server/tool_calls.h"

#include <cctype>
#include <set>

namespace lancet::server {
namespace {

using ojson = nlohmann::ordered_json;
using Err = std::optional<ApiError>;

constexpr size_t kMaxTools = 128;
constexpr size_t kMaxNameLength = 64;

const ojson* field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > kMaxNameLength) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

Err parse_tool(const ojson& t, size_t i, std::set<std::string>* seen, ToolSpec* out) {
  const std::string where = "tools[" + std::to_string(i) + "]";
  if (!t.is_object()) return bad_request("'" + where + "' must be an object", "tools");
  const ojson* type = field(t, "type");
  if (!type || !type->is_string() || type->get<std::string>() != "function")
    return bad_request("'" + where + ".type' must be \"function\"", "tools");
  const ojson* fn = field(t, "function");
  if (!fn || !fn->is_object()) return bad_request("'" + where + ".function' must be an object", "tools");
  const ojson* name = field(*fn, "name");
  if (!name || !name->is_string() || !valid_name(name->get<std::string>()))
    return bad_request("'" + where + ".function.name' must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
                       "tools");
  out->name = name->get<std::string>();
  if (!seen->insert(out->name).second)
    return bad_request("'tools': the function name '" + out->name + "' is given twice", "tools");
  if (const ojson* d = field(*fn, "description"); d && !d->is_string())
    return bad_request("'" + where + ".function.description' must be a string", "tools");
  out->parameters = ojson{{"type", "object"}};
  if (const ojson* p = field(*fn, "parameters")) {
    if (!p->is_object()) return bad_request("'" + where + ".function.parameters' must be a JSON schema object", "tools");
    if (const ojson* pt = field(*p, "type"); pt && !(pt->is_string() && pt->get<std::string>() == "object"))
      return bad_request("'" + where + ".function.parameters' must describe an object (\"type\": \"object\")",
                         "tools");
    out->parameters = *p;
  }
  return std::nullopt;
}

Err parse_tool_choice(const ojson& body, ToolRequest* r) {
  const ojson* tc = field(body, "tool_choice");
  if (!tc) return std::nullopt;
  if (tc->is_string()) {
    const std::string s = tc->get<std::string>();
    if (s == "none") r->choice = ToolChoice::kNone;
    else if (s == "auto") r->choice = ToolChoice::kAuto;
    else if (s == "required") r->choice = ToolChoice::kRequired;
    else return bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or a named function", "tool_choice");
  } else if (tc->is_object()) {
    const ojson* type = field(*tc, "type");
    const ojson* fn = field(*tc, "function");
    const ojson* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!type || *type != "function" || !name || !name->is_string())
      return bad_request("'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
    r->choice = ToolChoice::kNamed;
    r->named = name->get<std::string>();
  } else {
    return bad_request("'tool_choice' must be a string or an object", "tool_choice");
  }
  if (r->choice != ToolChoice::kNone && !r->given())
    return bad_request("'tool_choice' needs 'tools'", "tool_choice");
  if (r->choice == ToolChoice::kNamed) {
    for (const ToolSpec& t : r->tools)
      if (t.name == r->named) return std::nullopt;
    return bad_request("'tool_choice' names the function '" + r->named.substr(0, 64) + "', which 'tools' does not hold",
                       "tool_choice");
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> ToolRequest::names() const {
  std::vector<std::string> out;
  for (const ToolSpec& t : tools) out.push_back(t.name);
  return out;
}

std::optional<ApiError> parse_tool_request(const ojson& body, ToolRequest* out) {
  *out = ToolRequest{};
  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) return bad_request("'tools' must be a list", "tools");
    if (tools->size() > kMaxTools)
      return bad_request("'tools' may hold at most " + std::to_string(kMaxTools) + " functions", "tools");
    std::set<std::string> seen;
    for (size_t i = 0; i < tools->size(); ++i) {
      ToolSpec spec;
      if (auto e = parse_tool((*tools)[i], i, &seen, &spec)) return e;
      out->tools.push_back(std::move(spec));
    }
    if (!tools->empty()) out->tools_json = *tools;
  }
  if (const ojson* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) return bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    out->parallel = p->get<bool>();
  }
  return parse_tool_choice(body, out);
}

std::optional<ApiError> normalize_tool_calls(const nlohmann::json& calls, ojson* out) {
  if (!calls.is_array() || calls.empty())
    return bad_request("messages: an assistant message's 'tool_calls' must be a non-empty list", "messages");
  *out = ojson::array();
  for (const auto& c : calls) {
    const bool ok = c.is_object() && c.contains("function") && c["function"].is_object() &&
                    c["function"].contains("name") && c["function"]["name"].is_string();
    if (!ok) return bad_request("messages: each tool call needs 'function' with a string 'name'", "messages");
    const auto& fn = c["function"];
    ojson args = ojson::object();
    if (fn.contains("arguments") && !fn["arguments"].is_null()) {
      if (!fn["arguments"].is_string())
        return bad_request("messages: a tool call's 'function.arguments' must be a JSON string", "messages");
      const std::string& s = fn["arguments"].get_ref<const std::string&>();
      args = ojson::parse(s, nullptr, /*allow_exceptions=*/false);
      if (args.is_discarded() || !args.is_object())
        return bad_request("messages: a tool call's 'function.arguments' must hold a JSON object", "messages");
    }
    ojson call = ojson::object();
    if (c.contains("id") && c["id"].is_string()) call["id"] = c["id"].get<std::string>();
    call["type"] = "function";
    call["function"] = {{"name", fn["name"].get<std::string>()}, {"arguments", std::move(args)}};
    out->push_back(std::move(call));
  }
  return std::nullopt;
}

ojson tool_call_schema(const ToolRequest& r) {
  auto one = [](const ToolSpec& t) {
    ojson s = ojson::object();
    s["type"] = "object";
    s["properties"] = {{"name", {{"const", t.name}}}, {"parameters", t.parameters}};
    s["required"] = {"name", "parameters"};
    s["additionalProperties"] = false;
    return s;
  };
  if (r.choice == ToolChoice::kNamed) {
    for (const ToolSpec& t : r.tools)
      if (t.name == r.named) return one(t);
  }
  if (r.tools.size() == 1) return one(r.tools[0]);
  ojson any = ojson::array();
  for (const ToolSpec& t : r.tools) any.push_back(one(t));
  return ojson{{"anyOf", std::move(any)}};
}

}  // namespace lancet::server
