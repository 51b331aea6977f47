// Incremental detokenization for streamed generation: ids go in one at a time, and only
// complete UTF-8 text comes out. A token that ends inside a multi-byte character (byte-level
// BPE splits emoji and CJK across tokens) is held until the character completes. The
// concatenation of every push() and the final finish() equals Tokenizer::decode of all ids,
// byte for byte (ill-formed bytes become U+FFFD exactly as decode does).
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace lancet {

class StreamDetokenizer {
 public:
  // Keeps a copy of the tokenizer (cheap: shared state).
  explicit StreamDetokenizer(const Tokenizer& tokenizer, DecodeOptions options = {});

  // Adds one id; returns the text that became complete (possibly empty).
  std::string push(int32_t id);
  // Flushes what is held: an incomplete trailing sequence becomes U+FFFD. The detokenizer is
  // empty afterwards and can be reused.
  std::string finish();
  // Bytes held back because they may start a multi-byte character (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  DecodeOptions options_;
  std::string pending_;
};

}  // namespace lancet
