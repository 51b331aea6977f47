// What a regex's text says about where it can match, read from the PCRE2 pattern with PCRE2's
// meaning (UTF, UCP, caseless as compiled by RegexMatcher), so a scanner can skip text in which
// the regex cannot match or even begin a partial match:
//   - required: every match contains one of these literals (found by an Aho-Corasick pass);
//   - prefixes: every match, and every partial match cut by the subject's end, begins with one
//     of these (or with a prefix of one of them, when cut short);
//   - first_bytes: the bytes a match or partial match can begin with.
// Literals are stored with ASCII letters lowercased and are compared with ASCII case folded; a
// caseless ASCII 'k' or 's' also stands for U+212A and U+017F, the non-ASCII characters PCRE2
// folds to them. A pattern whose syntax is not fully understood here (back references, \G, \K,
// recursion, conditionals, verbs, the x flag, ...) or that can match the empty string is
// reported unusable and is searched everywhere, as before.
#pragma once

#include <bitset>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lancet::guard {

struct RegexLiterals {
  bool usable = false;
  std::optional<std::vector<std::string>> required;  // nullopt: no literal is required
  std::vector<std::string> prefixes;                 // empty: no prefix is known
  std::bitset<256> first_bytes;                      // all set when nothing is known

  // Can a match or a partial match begin at text[pos]? (pos < text.size(); text ends where the
  // stream seen so far ends, so a prefix cut short by the end is allowed.)
  bool could_start_at(std::string_view text, size_t pos) const;
};

// Never fails: a pattern it cannot read is returned with usable = false.
RegexLiterals analyze_regex(std::string_view pattern, bool case_sensitive);

}  // namespace lancet::guard
