// Document prompts, citations and extraction checks (document_prompt.h).
#include "documents/document_prompt.h"

#include <cstdio>
#include <regex>

namespace lancet::documents {
namespace {

using Json = nlohmann::json;

const char* kRules =
    "You answer from the document given as numbered context blocks. Use only what the blocks say. "
    "After each statement, cite the blocks it comes from by their tags, for example [CONTEXT_BLOCK_ID:003]. "
    "If the blocks do not contain the answer, say so.";

std::string task_text(const DocRequest& req) {
  switch (req.task) {
    case DocTask::kSummarize: return "Summarize the document.";
    case DocTask::kAsk: return "Question: " + req.question;
    case DocTask::kExtract:
      return "Extract the information from the document as one JSON value that follows this JSON Schema, and "
             "answer with the JSON alone:\n" +
             req.schema.dump();
  }
  return "";
}

std::string type_of(const Json& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  return "number";
}

Status check_value(const Json& v, const Json& schema, const std::string& where) {
  if (!schema.is_object()) return OkStatus();
  if (schema.contains("enum") && schema["enum"].is_array()) {
    bool found = false;
    for (const Json& e : schema["enum"]) found = found || e == v;
    if (!found) return InvalidArgument(where + ": not one of " + schema["enum"].dump());
  }
  if (schema.contains("type") && schema["type"].is_string()) {
    const std::string want = schema["type"], got = type_of(v);
    const bool ok = want == got || (want == "number" && got == "integer");
    if (!ok) return InvalidArgument(where + ": expected " + want + ", got " + got);
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (schema.contains("minimum") && schema["minimum"].is_number() && x < schema["minimum"].get<double>())
      return InvalidArgument(where + ": below the minimum " + schema["minimum"].dump());
    if (schema.contains("maximum") && schema["maximum"].is_number() && x > schema["maximum"].get<double>())
      return InvalidArgument(where + ": above the maximum " + schema["maximum"].dump());
  }
  if (v.is_object()) {
    if (schema.contains("required") && schema["required"].is_array())
      for (const Json& k : schema["required"])
        if (k.is_string() && !v.contains(k.get<std::string>()))
          return InvalidArgument(where + ": the required field '" + k.get<std::string>() + "' is missing");
    if (schema.contains("properties") && schema["properties"].is_object())
      for (const auto& [k, sub] : schema["properties"].items())
        if (v.contains(k)) RETURN_IF_ERROR(check_value(v[k], sub, where + "." + k));
  }
  if (v.is_array() && schema.contains("items"))
    for (size_t i = 0; i < v.size(); ++i) RETURN_IF_ERROR(check_value(v[i], schema["items"], where + "[" + std::to_string(i) + "]"));
  return OkStatus();
}

// The candidate JSON texts of an answer, most specific first.
std::vector<std::string> json_candidates(const std::string& a) {
  std::vector<std::string> out{a};
  const size_t fence = a.find("```");
  if (fence != std::string::npos) {
    size_t start = a.find('\n', fence);
    const size_t end = start == std::string::npos ? std::string::npos : a.find("```", start);
    if (end != std::string::npos) out.push_back(a.substr(start + 1, end - start - 1));
  }
  const size_t open = a.find_first_of("{[");
  if (open != std::string::npos) {
    const size_t close = a.find_last_of(a[open] == '{' ? '}' : ']');
    if (close != std::string::npos && close > open) out.push_back(a.substr(open, close - open + 1));
  }
  return out;
}

}  // namespace

std::string block_tag(int id) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "[CONTEXT_BLOCK_ID:%03d]", id);
  return buf;
}

nlohmann::ordered_json document_messages(const std::vector<ContextBlock>& blocks, const DocRequest& req) {
  std::string user = "Document:\n";
  for (const ContextBlock& b : blocks) user += block_tag(b.id) + " " + b.text + "\n";
  user += "\n" + task_text(req);
  nlohmann::ordered_json m = nlohmann::ordered_json::array();
  m.push_back({{"role", "system"}, {"content", kRules}});
  m.push_back({{"role", "user"}, {"content", user}});
  return m;
}

Status check_fits(const std::vector<ContextBlock>& blocks, const DocRequest& req, int64_t max_tokens,
                  int64_t max_model_len, const std::function<StatusOr<int64_t>(const nlohmann::ordered_json&)>& prompt_tokens) {
  ASSIGN_OR_RETURN(const int64_t need, prompt_tokens(document_messages(blocks, req)));
  if (need + max_tokens <= max_model_len) return OkStatus();
  if (blocks.empty())
    return OutOfRange("the task alone takes " + std::to_string(need) + " tokens and the answer " +
                      std::to_string(max_tokens) + ", over --max-model-len " + std::to_string(max_model_len));
  // The longest prefix of blocks that fits, to say where the document stops fitting.
  size_t lo = 0, hi = blocks.size();
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    const std::vector<ContextBlock> head(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(mid));
    ASSIGN_OR_RETURN(const int64_t t, prompt_tokens(document_messages(head, req)));
    if (t + max_tokens <= max_model_len) lo = mid; else hi = mid - 1;
  }
  const size_t left = blocks.size() - lo;
  return OutOfRange("the document does not fit: the prompt takes " + std::to_string(need) + " tokens and the answer " +
                    std::to_string(max_tokens) + ", over --max-model-len " + std::to_string(max_model_len) + "; " +
                    std::to_string(left) + " of " + std::to_string(blocks.size()) + " blocks (from block " +
                    std::to_string(lo + 1) + ", page " + std::to_string(blocks[lo].page) +
                    ", on) do not fit. Nothing was cut: raise --max-model-len, lower --max-tokens, or split the document");
}

std::vector<int> cited_blocks(const std::string& answer) {
  static const std::regex tag(R"(\[CONTEXT_BLOCK_ID:\s*0*(\d{1,6})\])");
  std::vector<int> out;
  for (auto it = std::sregex_iterator(answer.begin(), answer.end(), tag); it != std::sregex_iterator(); ++it)
    out.push_back(std::stoi((*it)[1].str()));
  return out;
}

StatusOr<nlohmann::json> extract_json(const std::string& answer, const nlohmann::json& schema) {
  Status last = InvalidArgument("the answer holds no JSON value");
  for (const std::string& text : json_candidates(answer)) {
    const Json v = Json::parse(text, nullptr, false);
    if (v.is_discarded()) continue;
    Status st = check_value(v, schema, "$");
    if (st.ok()) return v;
    last = st;
  }
  return last;
}

}  // namespace lancet::documents
