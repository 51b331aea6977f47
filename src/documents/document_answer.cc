// Document tasks from text to result (document_answer.h).
#include "documents/document_answer.h"

#include <utility>

namespace lancet::documents {

StatusOr<DocRequest> make_doc_request(const std::string& task, const std::string& question, nlohmann::json schema) {
  DocRequest req;
  if (task == "summarize") {
    req.task = DocTask::kSummarize;
  } else if (task == "ask") {
    if (question.empty()) return InvalidArgument("ask needs a question");
    req.task = DocTask::kAsk;
    req.question = question;
  } else if (task == "extract") {
    if (!schema.is_object()) return InvalidArgument("extract needs a schema (a JSON Schema object)");
    req.task = DocTask::kExtract;
    req.schema = std::move(schema);
  } else {
    return InvalidArgument("the task is summarize, ask or extract, not '" + task.substr(0, 64) + "'");
  }
  return req;
}

StatusOr<DocPrompt> build_document_prompt(const DocumentText& doc, const DocRequest& req, int64_t block_tokens,
                                          int64_t max_tokens, const DocModel& model) {
  DocPrompt out;
  ASSIGN_OR_RETURN(out.blocks, make_blocks(doc.pages, block_tokens, model.count_tokens));
  if (out.blocks.empty()) return InvalidArgument("the document has no text");
  auto prompt_tokens = [&](const nlohmann::ordered_json& m) -> StatusOr<int64_t> {
    ASSIGN_OR_RETURN(auto ids, model.encode_chat(m));
    return static_cast<int64_t>(ids.size());
  };
  // The whole prompt is encoded once; check_fits re-encodes shorter prompts only to report
  // how much does not fit.
  ASSIGN_OR_RETURN(out.ids, model.encode_chat(document_messages(out.blocks, req)));
  if (static_cast<int64_t>(out.ids.size()) + max_tokens > model.max_model_len) {
    RETURN_IF_ERROR(check_fits(out.blocks, req, max_tokens, model.max_model_len, prompt_tokens));
    return Internal("the document prompt's length changed between two encodings");
  }
  return out;
}

nlohmann::json document_result(const std::vector<ContextBlock>& blocks, const std::string& answer,
                               const DocRequest& req, int64_t prompt_tokens, bool* ok) {
  nlohmann::json j;
  j["blocks"] = nlohmann::json::array();
  for (const ContextBlock& b : blocks)
    j["blocks"].push_back({{"id", b.id}, {"page", b.page}, {"tokens", b.tokens}, {"text", b.text}});
  j["prompt_tokens"] = prompt_tokens;
  j["answer"] = answer;
  std::vector<int> cited = cited_blocks(answer), unknown;
  for (int id : cited)
    if (id < 1 || id > static_cast<int>(blocks.size())) unknown.push_back(id);
  j["cited_blocks"] = cited;
  j["unknown_cited_blocks"] = unknown;  // cited ids that are no block of the document
  *ok = true;
  if (req.task == DocTask::kExtract) {
    auto v = extract_json(answer, req.schema);
    j["valid"] = v.ok();
    if (v.ok()) j["json"] = *v; else j["error"] = v.status().message();
    *ok = v.ok();
  }
  return j;
}

}  // namespace lancet::documents
