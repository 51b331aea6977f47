// The token mask of a matcher state: the vocabulary tokens whose bytes the matcher accepts
// from that state, found by one walk of the token trie (a rejected byte prunes its subtree).
#pragma once

#include <cstdint>
#include <vector>

#include "structured/matcher.h"
#include "structured/token_trie.h"

namespace lancet::structured {

// mask: [ceil(vocab / 32)] words, overwritten; bit t set = token t keeps the prefix viable.
void compute_token_mask(const Matcher& state, const TokenTrie& trie, std::vector<uint32_t>* mask);

}  // namespace lancet::structured
