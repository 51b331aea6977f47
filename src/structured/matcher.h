// The character-level matcher of a Grammar: a pushdown automaton whose state is a small set
// of stacks of frames (more than one only while alternatives - anyOf, a repetition that may
// stop or go on - are both alive). It
// answers whether the bytes fed so far can still be completed to a document of the grammar
// (feed() returns false, leaving the state unchanged, when a byte cannot), whether they are
// one (complete()), and whether nothing may follow (done()). The state is plain data: copying
// a Matcher is cheap, which the token mask (token_mask.h) relies on.
//
// A grammar so ambiguous that more than 256 parses stay alive after a byte has that byte
// refused: its outputs stay valid, and the work per byte stays bounded.
//
// Whitespace between structural characters is bounded (MatcherOptions::max_whitespace per
// run, never at the document's start or end) so that generation cannot wander.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"

namespace lancet::structured {

struct MatcherOptions {
  int32_t max_whitespace = 1;  // spaces/newlines in one run between structural characters
  // The longest token in bytes (CompiledGrammar sets it from the trie): a bounded string with
  // at least this many characters still allowed, and past its minLength, has the same token
  // mask whatever its length, so its state key leaves the length out.
  int32_t longest_token = 1 << 30;
};

class Matcher {
 public:
  Matcher(const Grammar* grammar, MatcherOptions options = {});

  // One byte; false (state unchanged) when no document of the grammar continues with it.
  bool feed(uint8_t c);
  // All bytes, or false with the state unchanged.
  bool feed(std::string_view bytes);
  bool complete() const;
  bool can_continue() const;
  bool done() const { return complete() && !can_continue(); }
  // A string identifying the state (equal states, equal keys; the token mask cache's key).
  std::string state_key() const;
  // Parses alive (at most 256: a byte that would leave more is refused).
  size_t num_stacks() const { return stacks_.size(); }

  // One frame of a stack: a node being matched and its progress (fields by node kind).
  struct Frame {
    const GrammarNode* node = nullptr;
    uint8_t phase = 0;
    uint8_t flags = 0;   // number: 1 = negative, 2 = after the point; char class: the character's bytes
    uint8_t pending = 0; // string, char class: UTF-8 continuation bytes still due
    int32_t count = 0;   // string: characters; array, repeat: items; literal: bytes; number: integer digits;
                         // object: last property; sequence: nodes started
    int32_t count2 = 0;  // number: fraction digits; object: bytes of the key being matched
    int64_t a = 0;       // number: integer part; char class: the code point's bits so far
    int64_t b = 0;       // number: fraction digits' value
    uint64_t alive = 0;  // literal: alternatives still matching; object: candidate keys
  };
  struct Stack {
    std::vector<Frame> frames;
    int32_t ws = 0;  // whitespace bytes in the current run
  };

 private:
  // The stacks s becomes with byte c, appended to out; empty_moves counts the transitions so far
  // that consumed nothing (bounded).
  void feed_stack(Stack s, uint8_t c, std::vector<Stack>* out, int empty_moves) const;
  bool frame_can_end(const Frame& f) const;

  const Grammar* grammar_;
  MatcherOptions options_;
  std::vector<Stack> stacks_;
};

}  // namespace lancet::structured
