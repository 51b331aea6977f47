// Trie construction from the sorted token strings: each string shares its longest common
// prefix with the previous one, so the preorder is built in one pass with a stack of open nodes.
#include "structured/token_trie.h"

#include <algorithm>
#include <numeric>

namespace lancet::structured {

TokenTrie::TokenTrie(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty()) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b); });
  nodes_.push_back(Node{});
  std::vector<uint32_t> open = {0};  // open[d]: the node at depth d on the current path
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view s = bytes_[static_cast<size_t>(id)];
    longest_ = std::max(longest_, static_cast<int32_t>(s.size()));
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    while (open.size() > lcp + 1) {
      nodes_[open.back()].end = static_cast<uint32_t>(nodes_.size());
      open.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      Node n;
      n.byte = static_cast<uint8_t>(s[d]);
      open.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(n);
    }
    Node& last = nodes_[open.back()];
    if (last.tok_end == last.tok_begin) last.tok_begin = last.tok_end = static_cast<uint32_t>(ids_.size());
    ids_.push_back(id);
    last.tok_end = static_cast<uint32_t>(ids_.size());
    prev = s;
  }
  while (!open.empty()) {
    nodes_[open.back()].end = static_cast<uint32_t>(nodes_.size());
    open.pop_back();
  }
}

std::string_view TokenTrie::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return {};
  return bytes_[static_cast<size_t>(id)];
}

}  // namespace lancet::structured
