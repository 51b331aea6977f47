// See request_checks.h.
#include "engine/request_checks.h"

#include <string>

namespace lancet {

Status check_token_ids(std::span<const int32_t> ids, int64_t vocab) {
  for (int32_t t : ids)
    if (t < 0 || t >= vocab)
      return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary (size " +
                             std::to_string(vocab) + ")");
  return OkStatus();
}

Status check_context_length(int64_t prompt_len, int64_t max_tokens, int64_t max_len, std::string_view prompt_noun) {
  if (max_tokens >= 1 && prompt_len + max_tokens <= max_len) return OkStatus();
  const std::string noun(prompt_noun);
  return OutOfRange("This model's maximum context length is " + std::to_string(max_len) +
                    " tokens. However, you requested " + std::to_string(prompt_len + max_tokens) + " tokens (" +
                    std::to_string(prompt_len) + " in the " + noun + ", " + std::to_string(max_tokens) +
                    " in the completion). Please reduce the length of the " + noun + " or completion.");
}

}  // namespace lancet
