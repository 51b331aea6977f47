// Pooling of embedding requests: the last prompt token's hidden state after the final norm,
// L2-normalized (the last-token pooling of decoder embedding models such as
// e5-mistral/gte-Qwen, with OpenAI's unit-length vectors).
#pragma once

#include <span>
#include <vector>

namespace lancet {

// hidden: [hidden_size], the last token's row -> its unit-length copy (a zero row stays zero).
std::vector<float> pool_last_token(std::span<const float> hidden);

}  // namespace lancet
