// The checks a request's prompt passes before it is queued, written once: the engine, the HTTP
// server (which checks before submitting, to answer with the OpenAI error code) and the CLI give
// the same message for the same input.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"

namespace lancet {

// Every id in [0, vocab): InvalidArgument "token id T is outside the vocabulary (size V)".
Status check_token_ids(std::span<const int32_t> ids /*[n]*/, int64_t vocab);

// 1 <= max_tokens and prompt_len + max_tokens <= max_len, else OutOfRange with the message
// OpenAI's API gives: "This model's maximum context length is N tokens. However, you requested T
// tokens (P in the <prompt_noun>, M in the completion). Please reduce the length of the
// <prompt_noun> or completion." prompt_noun: "prompt", or "messages" for chat requests.
Status check_context_length(int64_t prompt_len, int64_t max_tokens, int64_t max_len,
                            std::string_view prompt_noun = "prompt");

}  // namespace lancet
