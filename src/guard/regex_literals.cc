// analyze_regex: a recursive-descent reader of the PCRE2 syntax subset the guard's rules use,
// computing for each part the small set of strings it matches exactly (when there is one), the
// literals any match of it must contain, the prefixes its matches start with and its possible
// first bytes. Sets are capped (kMaxSet strings); past a cap a part is "anything", which only
// makes the scanner search more, never less. Anything not understood makes the whole pattern
// unusable rather than guessed at.
#include "guard/regex_literals.h"

#include <algorithm>

#include "guard/keyword_automaton.h"
#include "guard/regex_matcher.h"

namespace lancet::guard {
namespace {

constexpr size_t kMaxSet = 16;        // strings in one exact/prefix/required set
constexpr size_t kMaxPrefix = 32;     // prefix strings are cut here (a prefix's prefix still holds)
constexpr size_t kMaxExact = 64;      // longer exact strings only serve as required literals
constexpr uint32_t kClassEnum = 8;    // classes with more code points are not enumerated

using Set = std::vector<std::string>;

struct Info {
  std::optional<Set> exact;     // every string this part can match, when few
  std::optional<Set> required;  // one of these occurs in every match of this part
  Set prefixes{""};             // every match starts with one of these ({""}: nothing known)
  std::bitset<256> first;       // first byte of a non-empty match
  bool nullable = false;        // can match without consuming text
};

bool has_empty(const Set& s) { return std::find(s.begin(), s.end(), "") != s.end(); }

void dedupe(Set* s) {
  std::sort(s->begin(), s->end());
  s->erase(std::unique(s->begin(), s->end()), s->end());
}

size_t shortest(const Set& s) {
  size_t n = SIZE_MAX;
  for (const std::string& x : s) n = std::min(n, x.size());
  return n;
}

// The more selective of two required sets: longer shortest literal, then fewer literals.
std::optional<Set> better(const std::optional<Set>& a, const std::optional<Set>& b) {
  if (!a) return b;
  if (!b) return a;
  const size_t sa = shortest(*a), sb = shortest(*b);
  if (sa != sb) return sa > sb ? a : b;
  return a->size() <= b->size() ? a : b;
}

Set cross(const Set& a, const Set& b) {
  Set out;
  for (const std::string& x : a)
    for (const std::string& y : b) out.push_back(x + y);
  dedupe(&out);
  return out;
}

void tidy_prefixes(Set* p) {
  for (std::string& s : *p)
    if (s.size() > kMaxPrefix) s.resize(kMaxPrefix);
  dedupe(p);
  if (p->empty() || has_empty(*p) || p->size() > kMaxSet) *p = Set{""};
}

// An exact set without the empty string is also a required set; overlong ones stop being exact.
void settle(Info* x) {
  if (!x->exact) return;
  if (!has_empty(*x->exact)) x->required = better(x->required, x->exact);
  for (const std::string& s : *x->exact)
    if (s.size() > kMaxExact) {
      x->exact.reset();
      return;
    }
}

Info zero_width() {
  Info i;
  i.exact = Set{""};
  i.nullable = true;
  return i;
}

// One character from a set too large to list; `first` bounds its first byte.
Info any_char(const std::bitset<256>& first) {
  Info i;
  i.first = first;
  return i;
}

std::bitset<256> all_bytes() { return std::bitset<256>().set(); }

// A lookahead reads text it does not consume: a partial match can end inside it, so nothing
// after it may extend a prefix, and a match attempt can begin at any byte.
Info lookahead() {
  Info i;
  i.first = all_bytes();
  i.nullable = true;
  return i;
}

void set_multibyte_leads(std::bitset<256>* b) {
  for (int c = 0xC2; c <= 0xF4; ++c) b->set(static_cast<size_t>(c));
}

// Scripts without case: PCRE2's caseless matching leaves these code points alone.
// (General punctuation, CJK symbols, kana and ideographs, Hangul syllables, compatibility and
// supplementary ideographs.)
bool caseless_safe(uint32_t lo, uint32_t hi) {
  static constexpr std::pair<uint32_t, uint32_t> kRanges[] = {
      {0x2000, 0x206F}, {0x3000, 0x9FFF}, {0xAC00, 0xD7A3}, {0xF900, 0xFAFF}, {0x20000, 0x2FFFF}};
  for (const auto& [a, b] : kRanges)
    if (lo >= a && hi <= b) return true;
  return false;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The bytes a character matched by \d, \w, \s, \h or \v (Unicode classes under UCP) can begin
// with, asked of PCRE2 itself once per process and class: every ASCII character, and for each
// lead byte of a 2- or 3-byte sequence all the characters it begins; 4-byte sequences are
// assumed to match.
std::bitset<256> ask_first_bytes(char escape) {
  std::bitset<256> t;
  auto re = RegexMatcher::compile(std::string("\\") + escape, true);
  if (!re.ok()) return t.set();
  const RegexMatcher& m = **re;
  for (uint32_t c = 0; c < 0x80; ++c)
    if (m.search(std::string(1, static_cast<char>(c)), 0, false).result == RegexMatcher::Result::kMatch) t.set(c);
  std::string all;
  for (uint32_t lead = 0xC2; lead <= 0xEF; ++lead) {
    const uint32_t lo = lead < 0xE0 ? (lead - 0xC0) << 6 : (lead - 0xE0) << 12;
    const uint32_t hi = lead < 0xE0 ? lo + 0x3F : lo + 0xFFF;
    all.clear();
    for (uint32_t cp = std::max<uint32_t>(lo, 0x80); cp <= hi; ++cp)
      if (cp < 0xD800 || cp > 0xDFFF) all += utf8(cp);
    if (m.search(all, 0, false).result == RegexMatcher::Result::kMatch) t.set(lead);
  }
  for (uint32_t lead = 0xF0; lead <= 0xF4; ++lead) t.set(lead);
  return t;
}

const std::bitset<256>& escape_first_bytes(char escape) {
  switch (escape) {
    case 'd': { static const auto t = ask_first_bytes('d'); return t; }
    case 'w': { static const auto t = ask_first_bytes('w'); return t; }
    case 's': { static const auto t = ask_first_bytes('s'); return t; }
    case 'h': { static const auto t = ask_first_bytes('h'); return t; }
    default: { static const auto t = ask_first_bytes('v'); return t; }
  }
}

const char kKelvin[] = "\xE2\x84\xAA";  // U+212A, caselessly 'k' in PCRE2
const char kLongS[] = "\xC5\xBF";       // U+017F, caselessly 's'

// One literal character. nullopt exact: a caseless character whose other cases are not known
// here (the caller treats it as any character).
Info literal(uint32_t cp, bool caseless) {
  Info i;
  Set v;
  if (cp < 0x80) {
    const uint8_t c = static_cast<uint8_t>(cp);
    const uint8_t lower = fold_ascii(c);
    v.push_back(std::string(1, static_cast<char>(lower)));
    i.first.set(lower);
    if (lower >= 'a' && lower <= 'z') {
      i.first.set(lower - 32u);
      if (caseless && lower == 'k') v.push_back(kKelvin), i.first.set(0xE2);
      if (caseless && lower == 's') v.push_back(kLongS), i.first.set(0xC5);
    }
  } else {
    if (caseless && !caseless_safe(cp, cp)) return any_char(all_bytes());
    v.push_back(utf8(cp));
    i.first.set(static_cast<uint8_t>(v.back()[0]));
  }
  i.exact = v;
  i.prefixes = v;
  settle(&i);
  return i;
}

Info concat(const Info& a, const Info& b) {
  Info r;
  r.nullable = a.nullable && b.nullable;
  r.first = a.first;
  if (a.nullable) r.first |= b.first;
  if (a.exact && b.exact && a.exact->size() * b.exact->size() <= kMaxSet) r.exact = cross(*a.exact, *b.exact);
  if (a.exact) {
    r.prefixes = a.exact->size() * b.prefixes.size() <= kMaxSet ? cross(*a.exact, b.prefixes) : *a.exact;
  } else {
    r.prefixes = a.prefixes;
  }
  tidy_prefixes(&r.prefixes);
  r.required = better(a.required, b.required);
  settle(&r);
  return r;
}

Info alternate(const Info& a, const Info& b) {
  Info r;
  r.nullable = a.nullable || b.nullable;
  r.first = a.first | b.first;
  if (a.exact && b.exact && a.exact->size() + b.exact->size() <= kMaxSet) {
    r.exact = *a.exact;
    r.exact->insert(r.exact->end(), b.exact->begin(), b.exact->end());
    dedupe(&*r.exact);
  }
  r.prefixes = a.prefixes;
  r.prefixes.insert(r.prefixes.end(), b.prefixes.begin(), b.prefixes.end());
  tidy_prefixes(&r.prefixes);
  if (a.required && b.required && a.required->size() + b.required->size() <= kMaxSet) {
    r.required = *a.required;
    r.required->insert(r.required->end(), b.required->begin(), b.required->end());
    dedupe(&*r.required);
  }
  settle(&r);
  return r;
}

// x{min,max}; max < 0: unbounded.
Info repeat(const Info& x, int min, int max) {
  if (min == 1 && max == 1) return x;
  Info r;
  r.first = x.first;
  if (min == 0) {
    r.nullable = true;
    if (max == 1 && x.exact && x.exact->size() + 1 <= kMaxSet) {
      r.exact = *x.exact;
      r.exact->push_back("");
      dedupe(&*r.exact);
    }
    return r;
  }
  r.nullable = x.nullable;
  r.prefixes = x.prefixes;
  r.required = x.required;
  if (min == max && x.exact && min <= 8) {
    Set p{""};
    for (int k = 0; k < min && p.size() <= kMaxSet; ++k) p = cross(p, *x.exact);
    if (p.size() <= kMaxSet) {
      r.exact = p;
      r.prefixes = p;
      tidy_prefixes(&r.prefixes);
    }
  }
  settle(&r);
  return r;
}

class Parser {
 public:
  Parser(std::string_view p, bool caseless) : p_(p), caseless_(caseless) {}

  std::optional<Info> run() {
    Info i = alternation();
    if (bad_ || pos_ != p_.size()) return std::nullopt;
    return i;
  }

 private:
  bool at_end() const { return pos_ >= p_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0'; }
  Info fail() {
    bad_ = true;
    return zero_width();
  }

  uint32_t code_point() {
    const auto c = static_cast<uint8_t>(p_[pos_++]);
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    uint32_t cp = more == 3 ? (c & 0x07u) : more == 2 ? (c & 0x0Fu) : more == 1 ? (c & 0x1Fu) : c;
    for (; more > 0 && !at_end(); --more) cp = (cp << 6) | (static_cast<uint8_t>(p_[pos_++]) & 0x3Fu);
    return cp;
  }

  Info alternation() {
    Info r = sequence();
    while (!bad_ && peek() == '|') {
      ++pos_;
      r = alternate(r, sequence());
    }
    return r;
  }

  // Concatenation, keeping the current run of exact parts apart so that a literal after an
  // inexact part ("zz" in "a\d+zz") is still seen whole.
  Info sequence() {
    Info before = zero_width(), run = zero_width();
    while (!bad_ && !at_end() && peek() != '|' && peek() != ')') {
      Info a = atom();
      if (bad_) break;
      int min = 1, max = 1;
      if (!quantifier(&min, &max)) break;
      a = repeat(a, min, max);
      if (run.exact && a.exact && run.exact->size() * a.exact->size() <= kMaxSet) {
        run = concat(run, a);
      } else {
        before = concat(before, run);
        run = std::move(a);
      }
    }
    return concat(before, run);
  }

  // Reads a quantifier if one follows; false on syntax this reader does not accept.
  bool quantifier(int* min, int* max) {
    const char c = peek();
    if (c == '*') {
      *min = 0, *max = -1;
    } else if (c == '+') {
      *min = 1, *max = -1;
    } else if (c == '?') {
      *min = 0, *max = 1;
    } else if (c == '{') {
      // Only {n}, {n,} and {n,m}: PCRE2 versions differ on the others ({,m}, spaces).
      size_t i = pos_ + 1;
      auto number = [&](int* out) {
        const size_t s = i;
        long v = 0;
        while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9' && v < 100000) v = v * 10 + (p_[i++] - '0');
        *out = static_cast<int>(v);
        return i > s;
      };
      if (!number(min)) return fail(), false;
      *max = *min;
      if (i < p_.size() && p_[i] == ',') {
        ++i;
        if (!number(max)) *max = -1;
      }
      if (i >= p_.size() || p_[i] != '}') return fail(), false;
      pos_ = i;
    } else {
      return true;
    }
    ++pos_;
    if (peek() == '+' || peek() == '?') ++pos_;  // possessive or lazy: same strings
    if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') return fail(), false;
    return true;
  }

  Info atom() {
    const char c = peek();
    switch (c) {
      case '(':
        ++pos_;
        return group();
      case '[':
        ++pos_;
        return klass();
      case '.':
        ++pos_;
        return any_char(all_bytes());
      case '^':
      case '$':
        ++pos_;
        return zero_width();
      case '\\':
        ++pos_;
        return escape();
      case '*':
      case '+':
      case '?':
      case '{':
        return fail();
      default:
        return literal(code_point(), caseless_);
    }
  }

  // The rest of a group up to and including its ')', with inline flags scoped to it.
  Info scoped() {
    const bool saved = caseless_;
    Info r = alternation();
    caseless_ = saved;
    if (peek() != ')') return fail();
    ++pos_;
    return r;
  }

  Info group() {
    if (peek() == '*') return fail();  // verbs and (*pla:...) forms
    if (peek() != '?') return scoped();
    ++pos_;
    const char c = peek();
    if (c == ':' || c == '>') {
      ++pos_;
      return scoped();
    }
    if (c == '=' || c == '!') {
      ++pos_;
      scoped();
      return lookahead();
    }
    if (c == '<' && (peek(1) == '=' || peek(1) == '!')) {
      pos_ += 2;
      scoped();
      return zero_width();  // reads only text before the match position
    }
    if (c == '<' || c == '\'' || (c == 'P' && peek(1) == '<')) {  // named group
      const char close = c == '\'' ? '\'' : '>';
      const size_t end = p_.find(close, pos_ + 1);
      if (end == std::string_view::npos) return fail();
      pos_ = end + 1;
      return scoped();
    }
    if (c == '#') {
      const size_t end = p_.find(')', pos_);
      if (end == std::string_view::npos) return fail();
      pos_ = end + 1;
      return zero_width();
    }
    // Option letters: (?i) for the rest of the group, (?i:...) for a group.
    bool on = true, caseless = caseless_;
    while (!at_end() && peek() != ')' && peek() != ':') {
      const char f = p_[pos_++];
      if (f == '-') {
        on = false;
      } else if (f == 'i') {
        caseless = on;
      } else if (f != 'm' && f != 's' && f != 'n' && f != 'U' && f != 'J') {
        return fail();  // x changes what whitespace means; the rest is not read here
      }
    }
    if (at_end()) return fail();
    if (p_[pos_++] == ')') {
      caseless_ = caseless;
      return zero_width();
    }
    const bool saved = caseless_;
    caseless_ = caseless;
    Info r = scoped();
    caseless_ = saved;
    return r;
  }

  // \xhh or \x{h...} after the 'x'.
  bool hex(uint32_t* cp) {
    uint32_t v = 0;
    auto digit = [](char ch) -> int {
      if (ch >= '0' && ch <= '9') return ch - '0';
      if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f') return (ch | 0x20) - 'a' + 10;
      return -1;
    };
    if (peek() == '{') {
      ++pos_;
      int n = 0;
      while (digit(peek()) >= 0 && n < 8) v = v * 16 + static_cast<uint32_t>(digit(p_[pos_++])), ++n;
      if (n == 0 || peek() != '}' || v > 0x10FFFF) return false;
      ++pos_;
    } else {
      for (int n = 0; n < 2 && digit(peek()) >= 0; ++n) v = v * 16 + static_cast<uint32_t>(digit(p_[pos_++]));
    }
    *cp = v;
    return true;
  }

  // Escapes that stand for one character, shared by classes and the rest: true with *cp set.
  bool char_escape(char c, uint32_t* cp) {
    switch (c) {
      case 't': *cp = 9; return true;
      case 'n': *cp = 10; return true;
      case 'r': *cp = 13; return true;
      case 'f': *cp = 12; return true;
      case 'e': *cp = 27; return true;
      case 'a': *cp = 7; return true;
      default: return false;
    }
  }

  // First bytes of a class escape (\d \w \s \h \v and their negations), or false.
  bool class_escape(char c, std::bitset<256>* first) {
    switch (c) {
      case 'd': case 'w': case 's': case 'h': case 'v': *first |= escape_first_bytes(c); return true;
      case 'D': case 'W': case 'S': case 'H': case 'V': first->set(); return true;
      default: return false;
    }
  }

  bool skip_property() {  // after \p or \P: {Name} or one letter
    if (peek() == '{') {
      const size_t end = p_.find('}', pos_);
      if (end == std::string_view::npos) return false;
      pos_ = end + 1;
      return true;
    }
    if (at_end()) return false;
    ++pos_;
    return true;
  }

  Info escape() {
    if (at_end()) return fail();
    const char c = peek();
    if (static_cast<uint8_t>(c) >= 0x80) return literal(code_point(), caseless_);
    const bool alnum = (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    ++pos_;
    if (!alnum) return literal(static_cast<uint8_t>(c), caseless_);
    uint32_t cp = 0;
    std::bitset<256> first;
    if (char_escape(c, &cp)) return literal(cp, caseless_);
    if (class_escape(c, &first)) return any_char(first);
    switch (c) {
      case 'b': case 'B': case 'A': case 'z': case 'Z':
        return zero_width();
      case 'x':
        return hex(&cp) ? literal(cp, caseless_) : fail();
      case 'p': case 'P':
        return skip_property() ? any_char(all_bytes()) : fail();
      case 'R': case 'X': case 'C':
        return any_char(all_bytes());  // one or more characters (\C: one byte)
      case 'N':
        return peek() == '{' ? fail() : any_char(all_bytes());
      case 'E':
        return zero_width();  // a lone \E is ignored
      case 'Q': {
        Info r = zero_width();
        while (!at_end() && !(peek() == '\\' && peek(1) == 'E')) r = concat(r, literal(code_point(), caseless_));
        if (!at_end()) pos_ += 2;
        return r;
      }
      default:
        return fail();  // back references, \G, \K, \g, \k, \c, \o, octal, ...
    }
  }

  // One class member: a code point, or (false) a class escape merged into *first / *big.
  bool class_member(uint32_t* cp, bool* is_cp, std::bitset<256>* first, bool* big) {
    *is_cp = false;
    if (peek() != '\\') {
      *cp = code_point();
      *is_cp = true;
      return true;
    }
    ++pos_;
    if (at_end()) return false;
    const char c = peek();
    if (static_cast<uint8_t>(c) >= 0x80) {
      *cp = code_point();
      *is_cp = true;
      return true;
    }
    ++pos_;
    const bool alnum = (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    if (!alnum) {
      *cp = static_cast<uint8_t>(c);
      *is_cp = true;
      return true;
    }
    if (char_escape(c, cp)) return *is_cp = true;
    if (c == 'b') return *cp = 8, *is_cp = true;
    if (c == 'x') return hex(cp) && (*is_cp = true);
    if (class_escape(c, first)) return *big = true;
    if (c == 'p' || c == 'P') {
      first->set();
      return (*big = true) && skip_property();
    }
    return false;
  }

  Info klass() {
    const bool negated = peek() == '^';
    if (negated) ++pos_;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    std::bitset<256> first;
    bool big = false;
    for (bool first_item = true;; first_item = false) {
      if (at_end()) return fail();
      if (peek() == ']' && !first_item) {
        ++pos_;
        break;
      }
      if (peek() == '[' && peek(1) == ':') {  // POSIX class
        const size_t end = p_.find(":]", pos_ + 2);
        if (end == std::string_view::npos) return fail();
        pos_ = end + 2;
        first.set();
        big = true;
        continue;
      }
      uint32_t lo = 0;
      bool is_cp = false;
      if (!class_member(&lo, &is_cp, &first, &big)) return fail();
      if (!is_cp) continue;
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < p_.size()) {
        ++pos_;
        if (!class_member(&hi, &is_cp, &first, &big) || !is_cp || hi < lo) return fail();
      }
      ranges.emplace_back(lo, hi);
    }
    if (negated) return any_char(all_bytes());
    uint64_t count = 0;
    for (const auto& [lo, hi] : ranges) {
      count += hi - lo + 1;
      for (uint32_t cp = lo; cp <= std::min<uint32_t>(hi, 0x7F); ++cp) first |= literal(cp, caseless_).first;
      if (hi >= 0x80) {
        const uint32_t from = std::max<uint32_t>(lo, 0x80);
        if (!caseless_ || caseless_safe(from, hi)) {
          set_multibyte_leads(&first);
        } else {
          first.set();
        }
      }
    }
    Info i = any_char(first);
    if (big || count > kClassEnum) return i;
    Set v;
    for (const auto& [lo, hi] : ranges)
      for (uint32_t cp = lo; cp <= hi; ++cp) {
        const Info one = literal(cp, caseless_);
        if (!one.exact) return i;
        v.insert(v.end(), one.exact->begin(), one.exact->end());
      }
    dedupe(&v);
    if (v.empty() || v.size() > kMaxSet) return i;
    i.exact = v;
    i.prefixes = v;
    settle(&i);
    return i;
  }

  std::string_view p_;
  size_t pos_ = 0;
  bool caseless_;
  bool bad_ = false;
};

}  // namespace

bool RegexLiterals::could_start_at(std::string_view text, size_t pos) const {
  if (!first_bytes[static_cast<uint8_t>(text[pos])]) return false;
  if (prefixes.empty()) return true;
  const size_t left = text.size() - pos;
  for (const std::string& f : prefixes) {
    const size_t n = std::min(f.size(), left);
    size_t i = 0;
    while (i < n && fold_ascii(static_cast<uint8_t>(text[pos + i])) == static_cast<uint8_t>(f[i])) ++i;
    if (i == n) return true;
  }
  return false;
}

RegexLiterals analyze_regex(std::string_view pattern, bool case_sensitive) {
  RegexLiterals out;
  out.first_bytes.set();
  const std::optional<Info> info = Parser(pattern, !case_sensitive).run();
  if (!info || info->nullable) return out;
  out.usable = true;
  out.required = info->required;
  if (!has_empty(info->prefixes)) out.prefixes = info->prefixes;
  out.first_bytes = info->first;
  return out;
}

}  // namespace lancet::guard
