// One compiled PCRE2 pattern (UTF-8, Unicode properties, JIT with hard partial matching) and
// the two searches the guard needs: a full search, and a search that also reports where a
// match that more text could still complete begins (a streaming caller holds text back from
// there). Invalid UTF-8 in the subject never fails a search (PCRE2_MATCH_INVALID_UTF).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace lancet::guard {

class RegexMatcher {
 public:
  enum class Result { kMatch, kPartial, kNone };
  struct Found {
    Result result = Result::kNone;
    size_t start = 0;  // byte offsets into the subject
    size_t end = 0;    // for kPartial: the subject's end
  };

  // Errors name the offset in the pattern and PCRE2's reason.
  static StatusOr<std::unique_ptr<RegexMatcher>> compile(const std::string& pattern, bool case_sensitive);
  ~RegexMatcher();
  RegexMatcher(const RegexMatcher&) = delete;
  RegexMatcher& operator=(const RegexMatcher&) = delete;

  // First match at or after `from` in `subject` (bytes before `from` serve lookbehinds). With
  // `partial`, a match cut off by the subject's end is reported as kPartial (hard partial
  // matching: it wins over a complete match that would start later).
  bool has_backreferences() const;
  bool jit_compiled() const;
  Found search(std::string_view subject, size_t from, bool partial) const;

 private:
  RegexMatcher() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lancet::guard
