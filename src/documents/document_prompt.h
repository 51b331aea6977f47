// The prompt of a document task: a system message with the rules, then the user message with
// every context block as "[CONTEXT_BLOCK_ID:001] text" and the task (summarize, answer a
// question, or extract JSON following a schema). The whole prompt plus the answer's budget must
// fit the context: what does not fit is reported (how many blocks, from which page), never cut.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "documents/sentence_blocks.h"

namespace lancet::documents {

enum class DocTask { kSummarize, kAsk, kExtract };

struct DocRequest {
  DocTask task = DocTask::kSummarize;
  std::string question;         // kAsk
  nlohmann::json schema;        // kExtract: a JSON Schema (object, array, string, number, ...)
};

// "[CONTEXT_BLOCK_ID:007]" for id 7.
std::string block_tag(int id);

// The chat messages (OpenAI layout) for the task over these blocks.
nlohmann::ordered_json document_messages(const std::vector<ContextBlock>& blocks, const DocRequest& req);

// prompt_tokens(messages): the tokens the rendered chat prompt takes. OK when prompt_tokens +
// max_tokens <= max_model_len; otherwise OutOfRange naming how many blocks (and from which page
// on) do not fit and the sizes involved.
Status check_fits(const std::vector<ContextBlock>& blocks, const DocRequest& req, int64_t max_tokens,
                  int64_t max_model_len, const std::function<StatusOr<int64_t>(const nlohmann::ordered_json&)>& prompt_tokens);

// The block ids an answer cites ("[CONTEXT_BLOCK_ID:12]" or "[CONTEXT_BLOCK_ID:012]"), in order.
std::vector<int> cited_blocks(const std::string& answer);

// The JSON value in an answer (the whole text, or the first fenced ```json block, or the text
// from its first '{' or '[' to the matching last one) checked against schema: type (object,
// array, string, number, integer, boolean, null), properties, required, items, enum, minimum,
// maximum. The message says where it fails ("$.items[2].price: expected number").
StatusOr<nlohmann::json> extract_json(const std::string& answer, const nlohmann::json& schema);

}  // namespace lancet::documents
