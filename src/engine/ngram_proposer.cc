// N-gram lookup: a backward scan per n; contexts are at most max_model_len tokens and the
// scan stops at the most recent match with k followers.
#include "engine/ngram_proposer.h"

#include <algorithm>

namespace lancet {

std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t k) {
  std::vector<int32_t> out;
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (k <= 0 || min_n < 1) return out;
  for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
    const int32_t* suffix = tokens.data() + len - n;
    // Candidate starts i < len - n (an occurrence other than the suffix itself), latest first;
    // the latest one followed by k tokens wins, else the one followed by the most (in a
    // short loop the latest occurrence sits right before the suffix and has few followers).
    int64_t best = -1;
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (tokens[i] != suffix[0] || !std::equal(suffix, suffix + n, tokens.data() + i)) continue;
      best = i;
      if (len - (i + n) >= k) break;
    }
    if (best >= 0) {
      const int64_t from = best + n, to = std::min<int64_t>(from + k, len);
      out.assign(tokens.begin() + from, tokens.begin() + to);
      return out;
    }
  }
  return out;
}

}  // namespace lancet
