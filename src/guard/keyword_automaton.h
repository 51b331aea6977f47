// Aho-Corasick over UTF-8 bytes, case-insensitive for ASCII letters only (multi-byte UTF-8
// sequences, e.g. CJK keywords, match byte for byte). Built once from all keywords of a rule
// set; the transition table is dense over byte classes (the distinct folded bytes that occur
// in keywords, plus one class for every other byte), so scanning is one table lookup per byte.
// Scanning is incremental: the caller keeps a State between chunks, so a keyword split across
// chunk boundaries still matches, and the state's depth says how many trailing bytes could
// still be the start of a keyword (what a streaming caller must hold back).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lancet::guard {

class KeywordAutomaton {
 public:
  struct Match {
    int32_t pattern;  // index into the keywords given to build()
    uint64_t start;   // absolute byte offsets [start, end) in the scanned stream
    uint64_t end;
  };
  // The scan position in a stream: automaton state plus bytes consumed so far.
  struct State {
    int32_t node = 0;
    uint64_t offset = 0;
  };

  KeywordAutomaton() = default;
  // Empty keywords are ignored (the caller rejects them with a message).
  explicit KeywordAutomaton(const std::vector<std::string>& keywords);

  // Scans `text` continuing from *state; appends every match that ends inside `text`.
  void scan(std::string_view text, State* state, std::vector<Match>* out) const;
  // Bytes at the end of the scanned stream that are a proper prefix of some keyword.
  int32_t live_depth(const State& state) const { return depth_.empty() ? 0 : depth_[state.node]; }
  int32_t max_keyword_bytes() const { return max_len_; }
  size_t num_keywords() const { return lengths_.size(); }
  size_t num_states() const { return depth_.size(); }

 private:
  std::array<uint8_t, 256> byte_class_{};
  int32_t num_classes_ = 1;
  std::vector<int32_t> next_;        // [num_states, num_classes_]: goto with failure links folded in
  std::vector<int32_t> depth_;       // [num_states]
  std::vector<int32_t> out_begin_;   // [num_states + 1]: CSR index into out_
  std::vector<int32_t> out_;         // patterns ending at each state (own and via suffix links)
  std::vector<int32_t> lengths_;     // [num_keywords] bytes
  int32_t max_len_ = 0;
};

// Lowercases ASCII letters; other bytes unchanged.
inline uint8_t fold_ascii(uint8_t c) { return (c >= 'A' && c <= 'Z') ? static_cast<uint8_t>(c + 32) : c; }

}  // namespace lancet::guard
