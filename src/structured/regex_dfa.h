// A regular-expression subset compiled to a byte DFA (vLLM's guided_regex): literals (UTF-8
// characters too), escapes (\d \w \s \D \W \S and escaped punctuation, \n \t \r), classes
// [a-z0-9_] and [^...] (ASCII ranges), '.', groups ( ) and (?: ), alternation |, and the
// quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same language); '^' at the start and
// '$' at the end are accepted and implied (the whole output must match). Anything else
// (backreferences, lookaround, named groups, flags) is an InvalidArgument naming it. '.',
// negated classes and \D \W \S match any character but newline (for negated classes and \D..:
// any but those listed) as whole UTF-8 characters, so the output stays valid UTF-8.
// States that cannot reach a match are removed: a byte either keeps a match possible or is
// refused.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace lancet::structured {

struct ByteDfa {
  std::vector<int32_t> next;        // [num_states * 256]: the next state, -1 = no match possible
  std::vector<uint8_t> accepting;   // [num_states]
  std::vector<uint8_t> has_next;    // [num_states]: some byte continues
  int32_t start = 0;
  int32_t step(int32_t state, uint8_t c) const { return next[static_cast<size_t>(state) * 256 + c]; }
};

struct RegexOptions {
  int32_t max_states = 4096;   // DFA states
  int32_t max_repeat = 256;    // m and n of {m,n}
  size_t max_pattern = 4096;   // bytes
};

StatusOr<ByteDfa> compile_regex(std::string_view pattern, const RegexOptions& options = {});

}  // namespace lancet::structured
