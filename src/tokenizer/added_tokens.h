// Added tokens (HF `added_tokens`: specials such as <|eot_id|>, and user tokens) and the matcher
// that cuts them out of text before pre-tokenization. Semantics follow HF tokenizers'
// AddedVocabulary: leftmost-longest matching over all added tokens; `single_word` drops a match
// that touches a word character (\w) on either side; `lstrip`/`rstrip` absorb the whitespace on
// that side into the token. Special tokens are always found, but when special parsing is off
// they are left in the text as plain characters (a special match still hides overlapping
// non-special ones, as in HF).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex_pcre2.h"

namespace lancet {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class AddedTokenMatcher {
 public:
  struct Segment {
    size_t begin = 0, end = 0;  // byte range in the text
    int32_t id = -1;            // added token id, or -1 for plain text
  };

  AddedTokenMatcher() = default;
  // tokens: every added token (content must be non-empty).
  static StatusOr<AddedTokenMatcher> build(const std::vector<AddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }
  bool has_non_special() const { return has_non_special_; }

  // Splits text into plain-text and token segments, in order, covering all of text.
  void split(std::string_view text, bool parse_special, std::vector<Segment>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                 // index into tokens_ when terminal
  };
  // Longest token starting at text[pos]; returns its index or -1, and its length.
  int32_t longest_at(std::string_view text, size_t pos, size_t* len) const;
  bool is_word_char_before(std::string_view text, size_t pos) const;
  bool is_word_char_at(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  std::array<bool, 256> first_byte_{};
  bool has_non_special_ = false;
  std::shared_ptr<const Pcre2Regex> word_re_;  // \w, for single_word
};

}  // namespace lancet
