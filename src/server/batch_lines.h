// The Batch API's line formats (JSONL), shared by /v1/batches and `lancet run-batch`.
//   input:  {"custom_id": "...", "method": "POST", "url": "/v1/chat/completions", "body": {...}}
//   output: {"id": "batch_req_...", "custom_id": "...", "response": {"status_code": 200,
//            "request_id": "...", "body": {...}}, "error": null}
// A request that ran and failed (status >= 400) goes to the error file in the output shape
// with the error envelope as its body; a line that could not be read as a request (bad JSON,
// missing custom_id, wrong url) goes there with "response": null and "error": {code, message}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_json.h"

namespace lancet::server {

// The endpoints a batch may target.
bool is_batch_endpoint(std::string_view url);

struct BatchLine {
  std::string custom_id;
  std::string url;
  std::string body;  // the request body, re-serialized, for the endpoint's parser
};

// Why a line cannot be run: the error file's "error" object.
struct LineError {
  std::string code;  // "invalid_json", "missing_custom_id", "invalid_method", "invalid_url", ...
  std::string message;
  std::string custom_id;  // the line's, when it had a readable one ("" otherwise)
};

// Parses one input line for a batch of `endpoint` ("": each line may name either endpoint,
// as `lancet run-batch` takes them); the error names the line's custom_id
// when it had a readable one.
std::optional<LineError> parse_batch_line(std::string_view line, std::string_view endpoint,
                                          const RequestLimits& limits, BatchLine* out);

// The input's lines, without empty ones (a trailing newline, blank lines); each keeps its
// 1-based line number for messages.
struct NumberedLine {
  int64_t number = 0;
  std::string_view text;
};
std::vector<NumberedLine> split_jsonl(std::string_view input);

// One output-file line (no trailing newline).
std::string response_line(const std::string& custom_id, int status_code, const std::string& request_id,
                          const Json& body);
std::string line_error_line(const LineError& err);

}  // namespace lancet::server
