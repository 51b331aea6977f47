// Prompt-lookup (n-gram) drafting: no second model. The last n tokens of the context are
// looked up earlier in the context (prompt and output), longest n first; the tokens that
// followed the most recent earlier occurrence are the drafts. Repetitive text (code edits,
// quoting the prompt, loops) gets long accepted runs; other text gets no drafts at no cost.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lancet {

// tokens: [len] the whole context. Returns at most k drafts (none when no n-gram with
// n in [min_n, max_n] recurs).
std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t k);

}  // namespace lancet
