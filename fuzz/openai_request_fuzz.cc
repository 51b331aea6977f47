// libFuzzer target: untrusted request bodies through the OpenAI request parsers (chat,
// completions, tokenize, detokenize). Any accepted request must give parameters the engine
// accepts; any rejected one must be a 400 with a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "server/openai_json.h"

using namespace lancet::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const RequestLimits limits;
  for (int which = 0; which < 2; ++which) {
    ApiRequest r;
    auto err = which == 0 ? parse_chat_request(body, limits, &r) : parse_completion_request(body, limits, &r);
    if (err) {
      if (err->status != 400 || err->message.empty()) std::abort();
      (void)dump_json(error_json(*err));
      continue;
    }
    lancet::SamplingParams p = r.params;
    if (!r.max_tokens_set) p.max_tokens = std::max(p.max_tokens, p.min_tokens);
    if (!p.validate(std::numeric_limits<int32_t>::max(), limits.max_logprobs).ok()) std::abort();
  }
  TokenizeRequest t;
  (void)parse_tokenize_request(body, limits, &t);
  std::vector<int32_t> ids;
  (void)parse_detokenize_request(body, limits, &ids);
  return 0;
}
