// KeywordAutomaton: trie construction, BFS failure links folded into a dense table, and the
// per-state output lists (own pattern plus those reached through dictionary suffix links).
#include "guard/keyword_automaton.h"

#include <cassert>
#include <deque>

namespace lancet::guard {

KeywordAutomaton::KeywordAutomaton(const std::vector<std::string>& keywords) {
  // Byte classes: one per distinct folded byte that occurs in a keyword; class 0 = all others.
  byte_class_.fill(0);
  for (const std::string& k : keywords)
    for (char ch : k) {
      const uint8_t f = fold_ascii(static_cast<uint8_t>(ch));
      if (byte_class_[f] == 0) byte_class_[f] = static_cast<uint8_t>(num_classes_++);
    }
  for (int c = 'A'; c <= 'Z'; ++c) byte_class_[c] = byte_class_[c + 32];
  assert(num_classes_ <= 256);

  // Trie (goto function); -1 = no edge yet.
  const int32_t C = num_classes_;
  next_.assign(static_cast<size_t>(C), -1);
  depth_.assign(1, 0);
  std::vector<std::vector<int32_t>> own(1);
  lengths_.reserve(keywords.size());
  for (size_t p = 0; p < keywords.size(); ++p) {
    const std::string& k = keywords[p];
    lengths_.push_back(static_cast<int32_t>(k.size()));
    if (k.empty()) continue;
    max_len_ = std::max<int32_t>(max_len_, static_cast<int32_t>(k.size()));
    int32_t node = 0;
    for (char ch : k) {
      const int32_t cls = byte_class_[static_cast<uint8_t>(ch)];
      int32_t& edge = next_[static_cast<size_t>(node) * C + cls];
      if (edge < 0) {
        edge = static_cast<int32_t>(depth_.size());
        depth_.push_back(depth_[node] + 1);
        own.emplace_back();
        next_.resize(next_.size() + static_cast<size_t>(C), -1);
      }
      node = next_[static_cast<size_t>(node) * C + cls];
    }
    own[node].push_back(static_cast<int32_t>(p));
  }

  // BFS: fail links; missing edges point where the failure chain leads (a DFA).
  const size_t n = depth_.size();
  std::vector<int32_t> fail(n, 0), order;
  order.reserve(n);
  std::deque<int32_t> queue;
  for (int32_t c = 0; c < C; ++c) {
    int32_t& e = next_[c];
    if (e < 0) {
      e = 0;
    } else {
      fail[e] = 0;
      queue.push_back(e);
    }
  }
  while (!queue.empty()) {
    const int32_t u = queue.front();
    queue.pop_front();
    order.push_back(u);
    for (int32_t c = 0; c < C; ++c) {
      int32_t& e = next_[static_cast<size_t>(u) * C + c];
      const int32_t via_fail = next_[static_cast<size_t>(fail[u]) * C + c];
      if (e < 0) {
        e = via_fail;
      } else {
        fail[e] = via_fail;
        queue.push_back(e);
      }
    }
  }
  // Outputs in BFS order: a state's list = its own patterns + its fail state's list.
  std::vector<std::vector<int32_t>> outs(n);
  for (int32_t u : order) {
    outs[u] = own[u];
    outs[u].insert(outs[u].end(), outs[fail[u]].begin(), outs[fail[u]].end());
  }
  out_begin_.assign(n + 1, 0);
  for (size_t u = 0; u < n; ++u) out_begin_[u + 1] = out_begin_[u] + static_cast<int32_t>(outs[u].size());
  out_.reserve(static_cast<size_t>(out_begin_[n]));
  for (size_t u = 0; u < n; ++u) out_.insert(out_.end(), outs[u].begin(), outs[u].end());
}

void KeywordAutomaton::scan(std::string_view text, State* state, std::vector<Match>* out) const {
  if (depth_.empty()) {
    state->offset += text.size();
    return;
  }
  const int32_t C = num_classes_;
  const int32_t* next = next_.data();
  const int32_t* ob = out_begin_.data();
  int32_t node = state->node;
  const uint64_t base = state->offset;
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size(); ++i) {
    node = next[static_cast<size_t>(node) * C + byte_class_[bytes[i]]];
    if (ob[node] != ob[node + 1]) {
      const uint64_t end = base + i + 1;
      for (int32_t k = ob[node]; k < ob[node + 1]; ++k) {
        const int32_t p = out_[static_cast<size_t>(k)];
        out->push_back({p, end - static_cast<uint64_t>(lengths_[static_cast<size_t>(p)]), end});
      }
    }
  }
  state->node = node;
  state->offset = base + text.size();
}

}  // namespace lancet::guard
