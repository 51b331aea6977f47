// A document cut into numbered context blocks on sentence boundaries (ICU's sentence
// BreakIterator, so Chinese 。！？ end sentences as . ! ? do): consecutive sentences of a page
// join a block until it would pass max_block_tokens; a longer sentence is a block of its own.
// Whitespace runs (PDF line breaks) fold to one space.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace lancet::documents {

struct ContextBlock {
  int id = 0;    // 1-based, in document order
  int page = 0;  // 1-based
  std::string text;
  int64_t tokens = 0;
};

// The sentences of utf8 (trimmed, empty ones dropped).
StatusOr<std::vector<std::string>> split_sentences(std::string_view utf8);

// count_tokens: the tokens a text costs in the prompt.
StatusOr<std::vector<ContextBlock>> make_blocks(const std::vector<std::string>& pages, int64_t max_block_tokens,
                                                const std::function<int64_t(const std::string&)>& count_tokens);

}  // namespace lancet::documents
