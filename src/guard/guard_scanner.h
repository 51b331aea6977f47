// Incremental application of a GuardRules to one text stream (a prompt, or one choice's
// generated output). feed() takes the text chunk by chunk; the keyword automaton state and a
// tail window for the regexes carry over between chunks, so matches split across chunks are
// found and no byte is scanned by the automaton twice. A regex whose literals are known
// (regex_literals.h) is searched only from bytes where it could start, and at the end of the
// text only while one of its required literals lies ahead of its search start. A rule match is decided (kept, or
// dropped by its language scope or an allow match covering it) once no pattern that could
// still be completed by more text starts at or before it; safe_end() is the prefix that can
// be released to a client: nothing blocked lies in it, whatever text follows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "guard/guard_rules.h"

namespace lancet::guard {

struct Hit {
  int32_t rule = -1;
  uint64_t start = 0;  // byte offsets in the stream
  uint64_t end = 0;
};

class GuardScanner {
 public:
  explicit GuardScanner(const GuardRules* rules);

  // Scans the next chunk; decided hits are appended to hits(). Chunks should end on UTF-8
  // character boundaries: a regex match through a character split between chunks can be missed.
  void feed(std::string_view chunk);
  // The text has ended: every remaining candidate is decided.
  void finish();
  // The whole text at once (feed + finish without partial-match bookkeeping: faster).
  void scan_all(std::string_view text);

  // Decided rule matches, in the order they were decided.
  const std::vector<Hit>& hits() const { return hits_; }
  // The earliest decided block match (the text must be cut at its start), if any.
  const std::optional<Hit>& block() const { return block_; }
  // Bytes from the stream's start that can be released (the block start when blocked).
  uint64_t safe_end() const;
  uint64_t bytes_seen() const { return kw_state_.offset; }

 private:
  struct Span {
    int32_t allow;
    uint64_t start, end;
  };
  void scan_regexes(bool final);
  void scan_combined(bool final, bool* skip);
  void search_regex(size_t r, bool final);
  void note_literals(std::string_view chunk);
  void note_languages(std::string_view chunk);
  void add_match(const GuardRules::Owner& owner, uint64_t start, uint64_t end);
  void decide(uint64_t frontier);
  bool applies(const Hit& h) const;

  const GuardRules* rules_;
  KeywordAutomaton::State kw_state_;
  std::vector<KeywordAutomaton::Match> kw_matches_;  // scratch
  std::string tail_;                                 // bytes [tail_base_, bytes_seen()) for the regexes
  uint64_t tail_base_ = 0;
  std::vector<uint64_t> regex_next_;     // [num_regexes] where each regex's next search starts
  KeywordAutomaton::State lit_state_;    // the regexes' required literals
  std::vector<uint64_t> last_literal_;   // [num_regexes] 1 + start of the last literal seen; 0: none
  uint64_t scanned_to_ = 0;              // where the previous regex scan ended
  std::vector<uint8_t> handled_;         // [num_regexes] scratch of scan_regexes
  std::vector<Hit> pending_;             // rule matches not yet decided
  std::vector<Span> allow_spans_;        // allow matches that may still cover a pending one
  std::vector<Hit> hits_;
  std::optional<Hit> block_;
  uint64_t frontier_ = 0;                // everything starting before it is decided
  uint64_t first_latin_ = UINT64_MAX;    // offset after the first ASCII letter
  uint64_t first_han_ = UINT64_MAX;      // offset after the first Han character
  uint32_t utf8_cp_ = 0;                 // a code point split across chunks
  int utf8_need_ = 0;
};

// The whole-text verdict: every decided hit and the first block, if any.
struct Verdict {
  std::vector<Hit> hits;
  std::optional<Hit> block;
};
Verdict scan_text(const GuardRules& rules, std::string_view text);

}  // namespace lancet::guard
