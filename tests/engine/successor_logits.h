// Logits of the test models whose next token is (last token + 1) mod vocab: one row per batch
// entry that asks for logits, 10 on the successor and 0 elsewhere.
#pragma once

#include <span>
#include <vector>

#include "runner/model_executor.h"

namespace lancet::testing {

inline void successor_logits(std::span<const SeqStepInput> batch, int64_t vocab, std::vector<float>* logits) {
  logits->clear();
  for (const auto& in : batch) {
    if (!in.need_logits) continue;
    const size_t row = logits->size();
    logits->resize(row + static_cast<size_t>(vocab), 0.0f);
    (*logits)[row + static_cast<size_t>((in.tokens.back() + 1) % vocab)] = 10.0f;
  }
}

}  // namespace lancet::testing
