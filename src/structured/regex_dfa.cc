// Pattern -> syntax tree (recursive descent) -> Thompson NFA (built back to front, counted
// repeats as copies) -> subset construction -> pruning of the states that cannot accept.
#include "structured/regex_dfa.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <memory>
#include <string>

namespace lancet::structured {
namespace {

using ByteSet = std::bitset<256>;

struct Ast {
  enum Kind { kBytes, kSeq, kAlt, kRepeat } kind = kSeq;
  ByteSet bytes;
  std::vector<Ast> kids;
  int32_t min = 0, max = -1;  // kRepeat; max -1 = unbounded
};

Ast bytes_node(const ByteSet& b) {
  Ast a;
  a.kind = Ast::kBytes;
  a.bytes = b;
  return a;
}
ByteSet range(int lo, int hi) {
  ByteSet b;
  for (int c = lo; c <= hi; ++c) b.set(static_cast<size_t>(c));
  return b;
}
// Any ASCII byte in `ascii`, or any multi-byte UTF-8 character.
Ast ascii_or_utf8(const ByteSet& ascii) {
  Ast alt;
  alt.kind = Ast::kAlt;
  alt.kids.push_back(bytes_node(ascii));
  const ByteSet cont = range(0x80, 0xBF);
  for (auto [lo, hi, n] : {std::tuple{0xC2, 0xDF, 1}, std::tuple{0xE0, 0xEF, 2}, std::tuple{0xF0, 0xF4, 3}}) {
    Ast seq;
    seq.kind = Ast::kSeq;
    seq.kids.push_back(bytes_node(range(lo, hi)));
    for (int i = 0; i < n; ++i) seq.kids.push_back(bytes_node(cont));
    alt.kids.push_back(std::move(seq));
  }
  return alt;
}
ByteSet digit_set() { return range('0', '9'); }
ByteSet word_set() { return range('0', '9') | range('a', 'z') | range('A', 'Z') | range('_', '_'); }
ByteSet space_set() {
  ByteSet b;
  for (char c : {' ', '\t', '\n', '\r', '\f', '\v'}) b.set(static_cast<uint8_t>(c));
  return b;
}
ByteSet ascii_set() { return range(0, 0x7F); }

class Parser {
 public:
  Parser(std::string_view p, const RegexOptions& o) : p_(p), opt_(o) {}

  StatusOr<Ast> parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    ASSIGN_OR_RETURN(Ast a, alternation());
    if (i_ < p_.size() && p_[i_] == '$' && i_ + 1 == p_.size()) ++i_;
    if (i_ < p_.size()) {
      if (p_[i_] == ')') return error("an unmatched ')'");
      std::string what = "'";
      what += p_[i_];
      what += "' here";
      return error(what);
    }
    return a;
  }

 private:
  Status error(const std::string& what) const {
    return InvalidArgument("regex: " + what + " at offset " + std::to_string(i_) + " is not supported");
  }
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  StatusOr<Ast> alternation() {
    Ast alt;
    alt.kind = Ast::kAlt;
    ASSIGN_OR_RETURN(Ast first, concat());
    alt.kids.push_back(std::move(first));
    while (more() && peek() == '|') {
      ++i_;
      ASSIGN_OR_RETURN(Ast next, concat());
      alt.kids.push_back(std::move(next));
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  StatusOr<Ast> concat() {
    Ast seq;
    seq.kind = Ast::kSeq;
    while (more() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && i_ + 1 == p_.size()) break;
      ASSIGN_OR_RETURN(Ast a, repeat());
      seq.kids.push_back(std::move(a));
    }
    return seq;
  }

  StatusOr<int32_t> number() {
    int64_t v = 0;
    const size_t from = i_;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > opt_.max_repeat) return error("a repeat count above " + std::to_string(opt_.max_repeat));
      ++i_;
    }
    if (i_ == from) return error("a '{' without a count");
    return static_cast<int32_t>(v);
  }

  StatusOr<Ast> repeat() {
    ASSIGN_OR_RETURN(Ast a, atom());
    while (more()) {
      int32_t lo = 0, hi = -1;
      const char c = peek();
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        lo = 1;
        ++i_;
      } else if (c == '?') {
        hi = 1;
        ++i_;
      } else if (c == '{') {
        ++i_;
        ASSIGN_OR_RETURN(lo, number());
        hi = lo;
        if (more() && peek() == ',') {
          ++i_;
          hi = -1;
          if (more() && peek() != '}') {
            ASSIGN_OR_RETURN(hi, number());
          }
        }
        if (!more() || peek() != '}') return error("a '{' without its '}'");
        ++i_;
        if (hi >= 0 && hi < lo) return error("{m,n} with n < m");
      } else {
        break;
      }
      if (more() && peek() == '?') ++i_;  // lazy: the same language
      if (more() && peek() == '+') return error("a possessive quantifier");
      Ast r;
      r.kind = Ast::kRepeat;
      r.min = lo;
      r.max = hi;
      r.kids.push_back(std::move(a));
      a = std::move(r);
    }
    return a;
  }

  // After a '\' outside a class.
  StatusOr<Ast> escape() {
    if (!more()) return error("a trailing '\\'");
    const char c = p_[i_++];
    switch (c) {
      case 'd': return bytes_node(digit_set());
      case 'w': return bytes_node(word_set());
      case 's': return bytes_node(space_set());
      case 'D': return ascii_or_utf8(ascii_set() & ~digit_set());
      case 'W': return ascii_or_utf8(ascii_set() & ~word_set());
      case 'S': return ascii_or_utf8(ascii_set() & ~space_set());
      case 'n': return bytes_node(range('\n', '\n'));
      case 't': return bytes_node(range('\t', '\t'));
      case 'r': return bytes_node(range('\r', '\r'));
      case 'f': return bytes_node(range('\f', '\f'));
      case 'v': return bytes_node(range('\v', '\v'));
      default: break;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      --i_;
      return error(std::string("the escape '\\") + c + "'");
    }
    return bytes_node(range(static_cast<uint8_t>(c), static_cast<uint8_t>(c)));
  }

  StatusOr<Ast> char_class() {
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++i_;
    }
    ByteSet set;
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      int lo = static_cast<uint8_t>(p_[i_++]);
      if (lo == '\\') {
        if (!more()) return error("a trailing '\\'");
        const char e = p_[i_++];
        if (e == 'd') { set |= digit_set(); continue; }
        if (e == 'w') { set |= word_set(); continue; }
        if (e == 's') { set |= space_set(); continue; }
        if (e == 'n') lo = '\n';
        else if (e == 't') lo = '\t';
        else if (e == 'r') lo = '\r';
        else if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
          i_ -= 2;
          return error(std::string("the escape '\\") + e + "' in a class");
        } else lo = static_cast<uint8_t>(e);
      }
      if (lo >= 0x80) {
        --i_;
        return error("a non-ASCII character in a class");
      }
      int hi = lo;
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        hi = static_cast<uint8_t>(p_[i_++]);
        if (hi == '\\') {
          if (!more()) return error("a trailing '\\'");
          hi = static_cast<uint8_t>(p_[i_++]);
        }
        if (hi >= 0x80 || hi < lo) return error("a class range");
      }
      set |= range(lo, hi);
    }
    if (!more()) return error("a '[' without its ']'");
    ++i_;
    if (negate) return ascii_or_utf8(ascii_set() & ~set & ~range('\n', '\n'));
    return bytes_node(set);
  }

  StatusOr<Ast> atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (more() && peek() == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') i_ += 2;
        else return error("a '(?' group (lookaround, named group or flags)");
      }
      ASSIGN_OR_RETURN(Ast a, alternation());
      if (!more() || peek() != ')') return error("a '(' without its ')'");
      ++i_;
      return a;
    }
    if (c == '[') {
      ++i_;
      return char_class();
    }
    if (c == '.') {
      ++i_;
      return ascii_or_utf8(ascii_set() & ~range('\n', '\n'));
    }
    if (c == '\\') {
      ++i_;
      return escape();
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return error("a quantifier with nothing to repeat");
    if (c == '^' || c == '$') return error("an anchor inside the pattern");
    const uint8_t b = static_cast<uint8_t>(c);
    // A multi-byte UTF-8 character is one atom (a quantifier repeats all of it).
    const size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    if (i_ + n > p_.size()) return error("a truncated UTF-8 character");
    Ast seq;
    seq.kind = Ast::kSeq;
    for (size_t k = 0; k < n; ++k) {
      const uint8_t x = static_cast<uint8_t>(p_[i_ + k]);
      seq.kids.push_back(bytes_node(range(x, x)));
    }
    i_ += n;
    if (n == 1) return std::move(seq.kids[0]);
    return seq;
  }

  std::string_view p_;
  RegexOptions opt_;
  size_t i_ = 0;
};

struct Nfa {
  struct State {
    ByteSet bytes;  // with `to`: a byte transition
    int32_t to = -1;
    std::vector<int32_t> eps;
  };
  std::vector<State> states;
  size_t limit = 0;
  bool overflow = false;

  int32_t add() {
    if (states.size() >= limit) overflow = true;
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }
  // The fragment for `a` that continues to `next`; returns its start.
  int32_t build(const Ast& a, int32_t next) {
    if (overflow) return next;
    switch (a.kind) {
      case Ast::kBytes: {
        const int32_t s = add();
        states[static_cast<size_t>(s)].bytes = a.bytes;
        states[static_cast<size_t>(s)].to = next;
        return s;
      }
      case Ast::kSeq:
        for (auto it = a.kids.rbegin(); it != a.kids.rend(); ++it) next = build(*it, next);
        return next;
      case Ast::kAlt: {
        std::vector<int32_t> starts;
        for (const Ast& k : a.kids) starts.push_back(build(k, next));
        const int32_t s = add();
        states[static_cast<size_t>(s)].eps = std::move(starts);
        return s;
      }
      case Ast::kRepeat: {
        const Ast& kid = a.kids[0];
        int32_t cur = next;
        if (a.max < 0) {
          const int32_t loop = add();
          const int32_t body = build(kid, loop);
          states[static_cast<size_t>(loop)].eps = {body, next};
          cur = loop;
        } else {
          for (int32_t k = a.min; k < a.max && !overflow; ++k) {
            const int32_t body = build(kid, cur);
            const int32_t opt = add();
            states[static_cast<size_t>(opt)].eps = {body, next};
            cur = opt;
          }
        }
        for (int32_t k = 0; k < a.min && !overflow; ++k) cur = build(kid, cur);
        return cur;
      }
    }
    return next;
  }

  std::vector<int32_t> closure(std::vector<int32_t> set) const {
    std::vector<uint8_t> in(states.size(), 0);
    std::vector<int32_t> stack = set;
    for (int32_t s : set) in[static_cast<size_t>(s)] = 1;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for (int32_t e : states[static_cast<size_t>(s)].eps)
        if (!in[static_cast<size_t>(e)]) {
          in[static_cast<size_t>(e)] = 1;
          set.push_back(e);
          stack.push_back(e);
        }
    }
    std::sort(set.begin(), set.end());
    return set;
  }
};

}  // namespace

StatusOr<ByteDfa> compile_regex(std::string_view pattern, const RegexOptions& options) {
  if (pattern.size() > options.max_pattern)
    return InvalidArgument("regex: longer than " + std::to_string(options.max_pattern) + " bytes");
  ASSIGN_OR_RETURN(Ast ast, Parser(pattern, options).parse());
  Nfa nfa;
  nfa.limit = static_cast<size_t>(options.max_states) * 16;
  const int32_t accept = nfa.add();
  const int32_t start = nfa.build(ast, accept);
  if (nfa.overflow) return InvalidArgument("regex: too large (repeat counts expand it past the limit)");
  // Subset construction.
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  ByteDfa dfa;
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    const int32_t id = static_cast<int32_t>(sets.size());
    ids.emplace(set, id);
    dfa.accepting.push_back(std::binary_search(set.begin(), set.end(), accept) ? 1 : 0);
    sets.push_back(std::move(set));
    return id;
  };
  dfa.start = intern(nfa.closure({start}));
  for (size_t d = 0; d < sets.size(); ++d) {
    if (sets.size() > static_cast<size_t>(options.max_states))
      return InvalidArgument("regex: more than " + std::to_string(options.max_states) + " automaton states");
    dfa.next.resize((d + 1) * 256, -1);
    for (int c = 0; c < 256; ++c) {
      std::vector<int32_t> moved;
      for (int32_t s : sets[d]) {
        const Nfa::State& st = nfa.states[static_cast<size_t>(s)];
        if (st.to >= 0 && st.bytes.test(static_cast<size_t>(c))) moved.push_back(st.to);
      }
      if (moved.empty()) continue;
      const int32_t t = intern(nfa.closure(std::move(moved)));
      dfa.next[d * 256 + static_cast<size_t>(c)] = t;
    }
  }
  // Keep only the states from which a match is reachable.
  const size_t n = sets.size();
  std::vector<uint8_t> live(dfa.accepting.begin(), dfa.accepting.end());
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t d = 0; d < n; ++d) {
      if (live[d]) continue;
      for (int c = 0; c < 256 && !live[d]; ++c) {
        const int32_t t = dfa.next[d * 256 + static_cast<size_t>(c)];
        if (t >= 0 && live[static_cast<size_t>(t)]) live[d] = changed = true;
      }
    }
  }
  if (!live[static_cast<size_t>(dfa.start)]) return InvalidArgument("regex: matches nothing");
  dfa.has_next.assign(n, 0);
  for (size_t d = 0; d < n; ++d)
    for (int c = 0; c < 256; ++c) {
      int32_t& t = dfa.next[d * 256 + static_cast<size_t>(c)];
      if (t >= 0 && !live[static_cast<size_t>(t)]) t = -1;
      if (t >= 0) dfa.has_next[d] = 1;
    }
  return dfa;
}

}  // namespace lancet::structured
