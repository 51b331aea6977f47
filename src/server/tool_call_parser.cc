// Parsing Llama 3.x JSON tool calls out of model output (see tool_call_parser.h).
#include "server/tool_call_parser.h"

#include <algorithm>
#include <regex>

#include <nlohmann/json.hpp>

namespace lancet::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The end (one past the closing brace) of the JSON object starting at s[i] == '{', or npos
// when it does not close. Braces inside strings do not count.
size_t object_end(std::string_view s, size_t i) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{') ++depth;
    else if (c == '}' && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

// One call object -> ToolCall; nullopt unless it is {"name": known, "parameters"|"arguments": object}.
std::optional<ToolCall> to_call(std::string_view text, const std::vector<std::string>& names) {
  const ojson j = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return std::nullopt;
  const std::string n = name->get<std::string>();
  if (std::find(names.begin(), names.end(), n) == names.end()) return std::nullopt;
  auto args = j.find("parameters");
  if (args == j.end()) args = j.find("arguments");
  if (args == j.end() || !args->is_object()) return std::nullopt;
  return ToolCall{"", n, args->dump(-1, ' ', false, ojson::error_handler_t::replace)};
}

}  // namespace

std::optional<std::vector<ToolCall>> parse_tool_calls(std::string_view text, const std::vector<std::string>& names) {
  size_t i = skip_space(text, 0);
  if (text.substr(i).starts_with(kPythonTag)) i = skip_space(text, i + kPythonTag.size());
  std::vector<ToolCall> calls;
  while (true) {
    if (i >= text.size() || text[i] != '{') return std::nullopt;
    const size_t end = object_end(text, i);
    if (end == std::string_view::npos) return std::nullopt;
    auto call = to_call(text.substr(i, end - i), names);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    i = skip_space(text, end);
    if (i == text.size()) return calls;
    if (text[i] != ';') return std::nullopt;
    i = skip_space(text, i + 1);
    if (i == text.size()) return calls;  // a trailing ';'
  }
}

std::string ToolCallStream::feed(std::string_view piece) {
  if (released_) return std::string(piece);
  held_ += piece;
  if (enforced_) return "";
  const size_t i = skip_space(held_, 0);
  if (i == held_.size()) return "";  // blank so far
  const std::string_view rest = std::string_view(held_).substr(i);
  const bool may_be_call =
      rest[0] == '{' || rest.starts_with(kPythonTag) || kPythonTag.starts_with(rest);
  if (may_be_call) return "";
  return finish();
}

std::string ToolCallStream::finish() {
  released_ = true;
  std::string out;
  out.swap(held_);
  return out;
}

CallArgumentsStream::Piece CallArgumentsStream::feed(std::string_view piece) {
  text_ += piece;
  Piece out;
  if (!started()) {
    // The grammar writes "name" first and tool names need no escapes, so a pattern suffices.
    static const std::regex kHead(R"re(^\s*\{\s*"name"\s*:\s*"([A-Za-z0-9_-]*)"\s*,\s*"parameters"\s*:\s*)re");
    std::smatch m;
    if (!std::regex_search(text_, m, kHead)) return out;
    out.name_ready = true;
    out.name = m[1].str();
    args_start_ = static_cast<size_t>(m.length(0));
  }
  if (sent_ == 0) args_start_ = skip_space(text_, args_start_);  // blanks the grammar allowed
  size_t end = text_.size();
  while (end > args_start_ + sent_ && (text_[end - 1] == '}' || is_space(text_[end - 1]))) --end;
  if (end > args_start_ + sent_) {
    out.arguments = text_.substr(args_start_ + sent_, end - args_start_ - sent_);
    sent_ = end - args_start_;
  }
  return out;
}

std::string CallArgumentsStream::finish() {
  if (!started()) return "";
  std::string args = text_.substr(args_start_);
  while (!args.empty() && is_space(args.back())) args.pop_back();
  if (!args.empty() && args.back() == '}') args.pop_back();  // the outer object's close
  while (!args.empty() && is_space(args.back())) args.pop_back();
  if (args.size() <= sent_) return "";
  std::string rest = args.substr(sent_);
  sent_ = args.size();
  return rest;
}

}  // namespace lancet::server
