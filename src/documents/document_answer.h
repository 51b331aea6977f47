// A document task from text to result, shared by `lancet doc` and the server's documents route:
// the document cut into numbered context blocks, the chat prompt checked to fit the context
// (what does not fit is reported, nothing is cut) and encoded; after generation, the result
// object with the blocks, the answer, its citations checked against the blocks and, for
// extract, the answer's JSON checked against the schema.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "documents/document_prompt.h"
#include "documents/document_text.h"
#include "documents/sentence_blocks.h"

namespace lancet::documents {

// What a document task needs from the model it runs on.
struct DocModel {
  std::function<int64_t(const std::string&)> count_tokens;  // tokens of a text (no special tokens)
  // The chat prompt's ids (generation prompt added).
  std::function<StatusOr<std::vector<int32_t>>(const nlohmann::ordered_json&)> encode_chat;
  int64_t max_model_len = 0;
};

struct DocPrompt {
  std::vector<ContextBlock> blocks;
  std::vector<int32_t> ids;
};

// The task as named by the CLI and the route: "summarize", "ask" (needs the question) or
// "extract" (needs the schema, a JSON object). InvalidArgument otherwise.
StatusOr<DocRequest> make_doc_request(const std::string& task, const std::string& question, nlohmann::json schema);

// Blocks of at most block_tokens, then the prompt; OutOfRange when prompt + max_tokens exceed
// the context (check_fits says how much does not fit), InvalidArgument for a document with no text.
StatusOr<DocPrompt> build_document_prompt(const DocumentText& doc, const DocRequest& req, int64_t block_tokens,
                                          int64_t max_tokens, const DocModel& model);

// {blocks, prompt_tokens, answer, cited_blocks, unknown_cited_blocks[, valid, json | error]};
// *ok is false when an extract answer is not valid JSON for the schema.
nlohmann::json document_result(const std::vector<ContextBlock>& blocks, const std::string& answer,
                               const DocRequest& req, int64_t prompt_tokens, bool* ok);

}  // namespace lancet::documents
