// POST /v1/lancet/documents: a document task over HTTP, the server's form of `lancet doc`. The
// body is JSON: {"task": "summarize" | "ask" | "extract", "question" (ask), "schema" (extract,
// a JSON Schema object), exactly one of "text" (UTF-8) or "pdf_base64" (a PDF, standard
// base64), "max_tokens" (default 256), "block_tokens" (default 128), "model" (optional)}. The
// document is cut into numbered blocks and prompted as documents/document_answer.h does; a
// document that does not fit the context is a 400 saying how much does not fit (nothing is cut);
// extract samples under the schema (structured outputs). The answer is generated greedily and
// returned with the blocks, the checked citations and, for extract, the validated JSON. Any
// other field is a 400 naming it. Waiting ends at the deadline (--timeout) or when the client
// is gone; either cancels the request.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/openai_json.h"
#include "server/serving_model.h"

namespace lancet::server {

struct DocumentsOptions {
  double timeout_s = 0;               // 0 = none
  std::function<bool()> client_gone;  // polled while the answer is generated
};

std::optional<ApiError> answer_document(ServingModel* model, const std::string& body, const DocumentsOptions& opt,
                                        Json* response);

// Standard base64 (RFC 4648 alphabet, '=' padding optional, whitespace skipped); nullopt
// when the text holds anything else.
std::optional<std::string> decode_base64(const std::string& text);

}  // namespace lancet::server
