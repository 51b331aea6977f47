// Added-token matcher; see added_tokens.h.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace lancet {
namespace {

// Start of the UTF-8 character that ends just before pos.
size_t prev_char_start(std::string_view t, size_t pos) {
  size_t p = pos - 1;
  while (p > 0 && (static_cast<unsigned char>(t[p]) & 0xC0) == 0x80) --p;
  return p;
}

bool whitespace_at(std::string_view t, size_t pos, size_t* len) {
  uint32_t cp = 0;
  const int n = utf8_decode_one(t.data() + pos, t.size() - pos, &cp);
  if (n <= 0 || !unicode_is_whitespace(cp)) return false;
  *len = static_cast<size_t>(n);
  return true;
}

}  // namespace

StatusOr<AddedTokenMatcher> AddedTokenMatcher::build(const std::vector<AddedToken>& tokens) {
  AddedTokenMatcher m;
  m.nodes_.emplace_back();
  bool need_word_re = false;
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;  // HF ignores empty added tokens
    const int32_t index = static_cast<int32_t>(m.tokens_.size());
    m.tokens_.push_back(t);
    m.has_non_special_ |= !t.special;
    need_word_re |= t.single_word;
    m.first_byte_[static_cast<unsigned char>(t.content[0])] = true;
    int32_t node = 0;
    for (unsigned char c : t.content) {
      auto& ch = m.nodes_[node].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, int32_t{-1}));
      if (it != ch.end() && it->first == c) {
        node = it->second;
      } else {
        const int32_t child = static_cast<int32_t>(m.nodes_.size());
        ch.insert(it, {c, child});
        m.nodes_.emplace_back();  // may reallocate: `ch` is not used after this
        node = child;
      }
    }
    // A duplicate content keeps the later entry, as HF's map update does.
    m.nodes_[node].token = index;
  }
  if (need_word_re) {
    ASSIGN_OR_RETURN(m.word_re_, Pcre2Regex::compile(R"(^\w)"));
  }
  return m;
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t* len) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& ch = nodes_[node].children;
    const unsigned char c = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, int32_t{-1}));
    if (it == ch.end() || it->first != c) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *len = i + 1 - pos;
    }
  }
  return best;
}

bool AddedTokenMatcher::is_word_char_at(std::string_view text, size_t pos) const {
  if (pos >= text.size()) return false;
  uint32_t cp = 0;
  const int n = utf8_decode_one(text.data() + pos, text.size() - pos, &cp);
  if (n <= 0) return false;
  size_t b, e;
  return word_re_->find(text.substr(pos, static_cast<size_t>(n)), 0, &b, &e);
}

bool AddedTokenMatcher::is_word_char_before(std::string_view text, size_t pos) const {
  return pos > 0 && is_word_char_at(text, prev_char_start(text, pos));
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special,
                              std::vector<Segment>* out) const {
  size_t emitted = 0;  // end of the last token segment
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    size_t len = 0;
    const int32_t index = longest_at(text, i, &len);
    if (index < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[index];
    size_t start = i, stop = i + len;
    i = stop;  // the search resumes after this match whether or not it is used
    if (tok.special && !parse_special) continue;
    if (tok.single_word &&
        (is_word_char_before(text, start) || is_word_char_at(text, stop))) {
      continue;
    }
    if (tok.lstrip) {
      while (start > emitted) {
        const size_t p = prev_char_start(text, start);
        size_t wl = 0;
        if (!whitespace_at(text, p, &wl)) break;
        start = p;
      }
    }
    if (tok.rstrip) {
      size_t wl = 0;
      while (stop < text.size() && whitespace_at(text, stop, &wl)) stop += wl;
      i = stop;
    }
    if (start > emitted) out->push_back({emitted, start, -1});
    out->push_back({start, stop, tok.id});
    emitted = stop;
  }
  if (emitted < text.size()) out->push_back({emitted, text.size(), -1});
}

}  // namespace lancet
