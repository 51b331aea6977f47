// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) used by the
// pre-tokenizer to split text the way the Hugging Face `Split` pre-tokenizer does with its
// Oniguruma regex. Patterns are translated first so PCRE2 and Oniguruma agree (see
// translate_onig_pattern). Matching is thread safe: per-thread match data and JIT stacks.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace lancet {

// Oniguruma's \s (in UTF-8 mode) is the Unicode White_Space property, which includes U+0085;
// PCRE2's \s with UCP does not. Rewrites \s and \S (inside and outside classes) to add it.
std::string translate_onig_pattern(std::string_view pattern);

class Pcre2Regex {
 public:
  // `pattern` uses Oniguruma syntax as found in tokenizer.json; it is translated internally.
  static StatusOr<std::shared_ptr<const Pcre2Regex>> compile(std::string_view pattern);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // Finds the next match in subject at or after `start`. Subject must be valid UTF-8 (not
  // checked, for speed). Returns false when there is none; else fills [*begin, *end).
  bool find(std::string_view subject, size_t start, size_t* begin, size_t* end) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  Pcre2Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  std::string pattern_;
};

}  // namespace lancet
