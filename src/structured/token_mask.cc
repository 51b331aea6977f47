// The walk keeps one matcher per trie depth, reused between siblings, so that visiting a
// node costs a copy of its parent's small state and one feed.
#include "structured/token_mask.h"

namespace lancet::structured {
namespace {

struct Walk {
  const TokenTrie& trie;
  std::vector<uint32_t>* mask;
  std::vector<Matcher> depth;  // depth[d]: the state after the path's first d bytes

  void children(uint32_t parent, size_t d) {
    const auto& nodes = trie.nodes();
    const auto& ids = trie.token_ids();
    if (depth.size() <= d + 1) depth.push_back(depth[d]);
    for (uint32_t i = parent + 1; i < nodes[parent].end; i = nodes[i].end) {
      depth[d + 1] = depth[d];
      if (!depth[d + 1].feed(nodes[i].byte)) continue;
      for (uint32_t t = nodes[i].tok_begin; t < nodes[i].tok_end; ++t) {
        const int32_t id = ids[t];
        (*mask)[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
      }
      if (nodes[i].end > i + 1) children(i, d + 1);
    }
  }
};

}  // namespace

void compute_token_mask(const Matcher& state, const TokenTrie& trie, std::vector<uint32_t>* mask) {
  mask->assign(static_cast<size_t>((trie.vocab_size() + 31) / 32), 0u);
  Walk w{trie, mask, {state}};
  w.depth.reserve(64);
  w.children(0, 0);
}

}  // namespace lancet::structured
