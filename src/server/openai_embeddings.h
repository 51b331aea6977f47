// /v1/embeddings' JSON (OpenAI's request and response), next to openai_json.*: the request's
// input as text(s) or token ids, encoding_format float or base64, and the response list. A
// field this server cannot honour (dimensions) is a 400 naming it, never ignored.
#pragma once

#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/lora_ref.h"
#include "server/openai_json.h"

namespace lancet::server {

struct EmbeddingRequest {
  std::string model;  // "" when absent
  std::shared_ptr<const LoraRef> lora;  // the adapter `model` names (null: the base model)
  // Either text inputs or token-id inputs (never both), in the request's order.
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> token_inputs;
  bool base64 = false;  // encoding_format "base64": little-endian float32 bytes
  std::string user;

  size_t num_inputs() const { return texts.size() + token_inputs.size(); }
};

// Input: a string, a list of strings, a list of token ids or a list of token-id lists, at most
// limits.max_prompts entries, none empty.
std::optional<ApiError> parse_embedding_request(std::string_view body, const RequestLimits& limits,
                                                EmbeddingRequest* out);

// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}.
Json embeddings_response_json(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                              bool base64, int64_t prompt_tokens);
// Standard base64 (with padding) of the floats' little-endian bytes, as the openai clients decode it.
std::string floats_base64(const std::vector<float>& v);

}  // namespace lancet::server
