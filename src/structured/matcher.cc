// The matcher's transitions, one node kind at a time. A parent sets its own phase to "after
// the value" before it pushes a child, so popping a finished child needs no callback; a
// number (or a literal that is a prefix of another) ends only when a byte that cannot
// continue it arrives, and that byte is then fed to the parent.
#include "structured/matcher.h"

#include <algorithm>
#include <cstring>

namespace lancet::structured {
namespace {

using Frame = Matcher::Frame;
using Stack = Matcher::Stack;

constexpr int64_t kPow10[] = {1LL,
                              10LL,
                              100LL,
                              1000LL,
                              10000LL,
                              100000LL,
                              1000000LL,
                              10000000LL,
                              100000000LL,
                              1000000000LL,
                              10000000000LL,
                              100000000000LL,
                              1000000000000LL,
                              10000000000000LL,
                              100000000000000LL,
                              1000000000000000LL,
                              10000000000000000LL,
                              100000000000000000LL,
                              1000000000000000000LL};

bool is_ws(uint8_t c) { return c == ' ' || c == '\n'; }

uint64_t all_bits(size_t n) { return n >= 64 ? ~0ULL : ((1ULL << n) - 1); }

Frame start_frame(const GrammarNode* n) {
  Frame f;
  f.node = n;
  return f;
}

// Whether some number with this prefix lies in the node's bounds: the completions of a
// prefix form, per count of digits still to come, one interval of grid values.
bool number_viable(const Frame& f, const NumberShape& s) {
  const int64_t scale = kPow10[s.frac_digits];
  const bool neg = f.flags & 1, dot = f.flags & 2;
  auto hits = [&](bool negative, int64_t mlo, int64_t mhi) {
    const int64_t vlo = negative ? -mhi : mlo, vhi = negative ? -mlo : mhi;
    return vlo <= s.hi_units && vhi >= s.lo_units;
  };
  const int32_t L = f.count;
  if (L == 0) {
    const int64_t maxmag = kPow10[s.max_int_digits] * scale - 1;
    return hits(true, 0, maxmag) || (!neg && hits(false, 0, maxmag));
  }
  if (!dot) {
    if (f.a == 0) return hits(neg, 0, scale - 1);
    for (int32_t k = 0; L + k <= s.max_int_digits; ++k)
      if (hits(neg, f.a * kPow10[k] * scale, (f.a + 1) * kPow10[k] * scale - 1)) return true;
    return false;
  }
  const int64_t step = kPow10[s.frac_digits - f.count2];
  const int64_t base = f.a * scale + f.b * step;
  return hits(neg, base, base + step - 1);
}

bool number_can_end(const Frame& f, const NumberShape& s) {
  if (f.count == 0 || ((f.flags & 2) && f.count2 == 0)) return false;
  const int64_t mag = f.a * kPow10[s.frac_digits] + f.b * kPow10[s.frac_digits - f.count2];
  const int64_t v = (f.flags & 1) ? -mag : mag;
  return v >= s.lo_units && v <= s.hi_units;
}

// Candidate next properties after property `last` (-1: none yet): the later ones up to and
// including the first required one.
uint64_t next_keys(const GrammarNode& n, int32_t last) {
  uint64_t bits = 0;
  for (size_t j = static_cast<size_t>(last + 1); j < n.properties.size(); ++j) {
    bits |= 1ULL << j;
    if (n.properties[j].required) break;
  }
  return bits;
}

bool can_close_object(const GrammarNode& n, int32_t last) {
  for (size_t j = static_cast<size_t>(last + 1); j < n.properties.size(); ++j)
    if (n.properties[j].required) return false;
  return true;
}

// The code points a character class can still match once the first bytes of a UTF-8 character
// are in: prefix holds their payload bits, `more` continuation bytes are still due and the
// character has `len` bytes in all. Overlong forms, surrogates and code points past U+10FFFF
// are no characters.
bool class_viable(const GrammarNode& n, uint32_t prefix, int more, int len) {
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  uint32_t lo = prefix << (6 * more), hi = ((prefix + 1) << (6 * more)) - 1;
  lo = std::max(lo, kMin[len]);
  hi = std::min<uint32_t>(hi, 0x10FFFF);
  if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return false;
  if (!n.negated) {
    for (const auto& [a, b] : n.ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Negated: some code point of [lo, hi] lies outside every range (sorted, disjoint).
  uint32_t next = lo;
  for (const auto& [a, b] : n.ranges) {
    if (b < next) continue;
    if (a > next) return true;
    if (b >= hi) return false;
    next = b + 1;
  }
  return next <= hi;
}

// Frames of raw-text nodes only (a context-free grammar's): whether anything can follow is
// found by trying the bytes; a JSON frame always has something to close.
bool raw_text_stack(const Stack& s) {
  for (const Frame& f : s.frames) {
    switch (f.node->kind) {
      case NodeKind::kSequence:
      case NodeKind::kRepeat:
      case NodeKind::kCharClass:
      case NodeKind::kLiteral:
      case NodeKind::kRegex:
      case NodeKind::kAnyOf:
        break;
      default:
        return false;
    }
  }
  return true;
}

// Bounds on one byte's work: transitions that consume nothing (a sequence starting its next
// node, a finished node giving the byte to its parent), and the depth of a stack. A grammar's
// recursion that consumes nothing is refused when it is built (gbnf_grammar.h); these only stop
// what slips past that.
constexpr int kMaxEmptyMoves = 4096;
constexpr size_t kMaxFrames = 4096;
constexpr size_t kMaxStacks = 256;

}  // namespace

Matcher::Matcher(const Grammar* grammar, MatcherOptions options) : grammar_(grammar), options_(options) {
  Stack s;
  s.frames.push_back(start_frame(grammar->root()));
  stacks_.push_back(std::move(s));
}

bool Matcher::frame_can_end(const Frame& f) const {
  const GrammarNode& n = *f.node;
  switch (n.kind) {
    case NodeKind::kSequence:
      for (size_t i = static_cast<size_t>(f.count); i < n.sequence.size(); ++i)
        if (!n.sequence[i]->nullable) return false;
      return true;
    case NodeKind::kRepeat:
      return f.count >= n.min_items;
    case NodeKind::kAnyOf:
      return n.nullable;
    case NodeKind::kLiteral:
      if (f.phase == 0) return n.nullable;
      break;
    default:
      break;
  }
  if (n.kind == NodeKind::kNumber) return f.phase == 1 && number_can_end(f, n.number);
  if (n.kind == NodeKind::kRegex) return n.regex.accepting[static_cast<size_t>(f.phase == 0 ? n.regex.start : f.count)];
  if (n.kind == NodeKind::kLiteral) {
    if (f.phase == 0) return false;
    for (size_t i = 0; i < n.literals.size(); ++i)
      if ((f.alive >> i & 1) && n.literals[i].size() == static_cast<size_t>(f.count)) return true;
  }
  return false;
}

// Every frame can end: the top one where it is, each one below it after the child above (only
// raw-text parents can: a JSON container still needs its closing character).
bool Matcher::complete() const {
  for (const Stack& s : stacks_) {
    bool all = true;
    for (const Frame& f : s.frames) all = all && frame_can_end(f);
    if (all) return true;
  }
  return false;
}

bool Matcher::can_continue() const {
  for (const Stack& s : stacks_) {
    if (s.frames.empty()) continue;
    // A regex at the root continues only while its state has a way on.
    const Frame& f = s.frames.back();
    if (s.frames.size() == 1 && f.node->kind == NodeKind::kRegex) {
      const ByteDfa& d = f.node->regex;
      if (d.has_next[static_cast<size_t>(f.phase == 0 ? d.start : f.count)]) return true;
      continue;
    }
    if (!raw_text_stack(s)) return true;
    thread_local std::vector<Stack> probe;
    for (int c = 0; c < 256; ++c) {
      probe.clear();
      feed_stack(s, static_cast<uint8_t>(c), &probe, 0);
      if (!probe.empty()) return true;
    }
  }
  return false;
}

bool Matcher::feed(uint8_t c) {
  // The next states; per thread, so that copying a matcher copies only its state.
  thread_local std::vector<Stack> scratch_;
  scratch_.clear();
  for (const Stack& s : stacks_) feed_stack(s, c, &scratch_, 0);
  if (scratch_.empty()) return false;
  if (scratch_.size() > 1) {
    // Alternatives that reached the same state are one.
    std::vector<std::string> keys;
    std::vector<Stack> unique;
    for (Stack& s : scratch_) {
      Matcher one(*this);
      one.stacks_.assign(1, s);
      std::string k = one.state_key();
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
      keys.push_back(std::move(k));
      unique.push_back(std::move(s));
    }
    scratch_ = std::move(unique);
    // A grammar ambiguous enough to keep more parses alive than this gets the byte refused
    // (its outputs stay valid, but some are not reachable) instead of a cost without bound.
    if (scratch_.size() > kMaxStacks) return false;
  }
  stacks_.swap(scratch_);
  return true;
}

bool Matcher::feed(std::string_view bytes) {
  const std::vector<Stack> saved = stacks_;
  for (char ch : bytes) {
    if (!feed(static_cast<uint8_t>(ch))) {
      stacks_ = saved;
      return false;
    }
  }
  return true;
}

std::string Matcher::state_key() const {
  std::string key;
  auto put = [&key](const auto& v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  for (const Stack& s : stacks_) {
    put(s.ws);
    put(static_cast<int32_t>(s.frames.size()));
    for (const Frame& f : s.frames) {
      const GrammarNode& n = *f.node;
      put(f.node);
      put(f.phase);
      put(f.flags);
      put(f.pending);
      // A string's length matters only near its bounds; everything else is kept.
      const bool free_string = n.kind == NodeKind::kString && f.count >= n.min_length &&
                               (n.max_length < 0 || n.max_length - f.count >= options_.longest_token);
      // An unbounded repetition past its minimum continues the same way however often it ran.
      const bool free_repeat = n.kind == NodeKind::kRepeat && n.max_items < 0 && f.count >= n.min_items;
      put(free_string || free_repeat ? -1 : f.count);
      put(f.count2);
      put(f.a);
      put(f.b);
      put(f.alive);
    }
  }
  return key;
}

void Matcher::feed_stack(Stack s, uint8_t c, std::vector<Stack>* out, int empty_moves) const {
  const bool ws = is_ws(c);
  auto take_ws = [&]() {
    if (s.ws < options_.max_whitespace) {
      s.ws++;
      out->push_back(std::move(s));
    }
  };
  auto accept = [&]() {
    s.ws = 0;
    out->push_back(std::move(s));
  };
  for (;; ++empty_moves) {
    if (s.frames.empty()) return;  // the document is finished: nothing may follow
    if (empty_moves > kMaxEmptyMoves || s.frames.size() > kMaxFrames) return;
    Frame& f = s.frames.back();
    const GrammarNode& n = *f.node;
    switch (n.kind) {
      case NodeKind::kAnyOf: {
        for (const GrammarNode* alt : n.any_of) {
          Stack t = s;
          t.frames.back() = start_frame(alt);
          feed_stack(std::move(t), c, out, empty_moves + 1);
        }
        return;
      }
      case NodeKind::kSequence: {
        if (f.count >= static_cast<int32_t>(n.sequence.size())) {
          s.frames.pop_back();  // every node matched: the byte is the parent's
          continue;
        }
        const GrammarNode* next = n.sequence[static_cast<size_t>(f.count)];
        f.count++;  // the parent's state after the child, set before the child is pushed
        s.frames.push_back(start_frame(next));
        continue;
      }
      case NodeKind::kRepeat: {
        // Another repetition (items never match empty, so it consumes this byte or dies), and,
        // past the minimum, the end of the repetition: both may hold.
        const bool more = n.max_items < 0 || f.count < n.max_items;
        const bool can_stop = f.count >= n.min_items;
        if (more) {
          Stack t = s;
          t.frames.back().count++;
          t.frames.push_back(start_frame(n.items));
          if (!can_stop) {
            s = std::move(t);
            continue;
          }
          feed_stack(std::move(t), c, out, empty_moves + 1);
        }
        if (!can_stop) return;
        s.frames.pop_back();
        continue;
      }
      case NodeKind::kCharClass: {
        uint32_t cp = 0;
        int more = 0, len = f.flags;
        if (f.phase == 0) {
          if (c < 0x80) cp = c, more = 0;
          else if (c >= 0xC2 && c <= 0xDF) cp = c & 0x1Fu, more = 1;
          else if (c >= 0xE0 && c <= 0xEF) cp = c & 0x0Fu, more = 2;
          else if (c >= 0xF0 && c <= 0xF4) cp = c & 0x07u, more = 3;
          else return;
          len = more + 1;
        } else {
          if (c < 0x80 || c > 0xBF) return;
          cp = (static_cast<uint32_t>(f.a) << 6) | (c & 0x3Fu);
          more = f.pending - 1;
        }
        if (!class_viable(n, cp, more, len)) return;
        if (more == 0) {
          s.frames.pop_back();
          return accept();
        }
        f.phase = 1;
        f.flags = static_cast<uint8_t>(len);
        f.a = cp;
        f.pending = static_cast<uint8_t>(more);
        return accept();
      }
      case NodeKind::kAnyValue: {
        const GrammarNode* pick = nullptr;
        if (c == '{') pick = grammar_->any_object();
        else if (c == '[') pick = grammar_->any_array();
        else if (c == '"') pick = grammar_->any_string();
        else if (c == '-' || (c >= '0' && c <= '9')) pick = grammar_->any_number();
        else if (c == 't' || c == 'f' || c == 'n') pick = grammar_->any_keyword();
        if (!pick) return;
        f = start_frame(pick);
        continue;
      }
      case NodeKind::kLiteral: {
        if (f.phase == 0) {
          f.phase = 1;
          f.count = 0;
          f.alive = all_bits(n.literals.size());
        }
        const size_t pos = static_cast<size_t>(f.count);
        uint64_t next = 0;
        bool ended = false, longer = false;
        for (size_t i = 0; i < n.literals.size(); ++i) {
          if (!(f.alive >> i & 1)) continue;
          const std::string& lit = n.literals[i];
          if (lit.size() == pos) ended = true;
          else if (static_cast<uint8_t>(lit[pos]) == c) {
            next |= 1ULL << i;
            if (lit.size() > pos + 1) longer = true;
          }
        }
        if (next) {
          f.alive = next;
          f.count++;
          if (!longer) s.frames.pop_back();  // every alternative left is matched in full
          return accept();
        }
        if (!ended) return;
        s.frames.pop_back();  // a shorter alternative ended here: the byte is the parent's
        continue;
      }
      case NodeKind::kRegex: {
        const ByteDfa& d = n.regex;
        if (f.phase == 0) {
          f.phase = 1;
          f.count = d.start;
        }
        const int32_t t = d.step(f.count, c);
        if (t >= 0) {
          f.count = t;
          return accept();
        }
        if (!d.accepting[static_cast<size_t>(f.count)]) return;
        s.frames.pop_back();  // the match ended before this byte: it is the parent's
        continue;
      }
      case NodeKind::kString: {
        if (f.phase == 0) {
          if (c != '"') return;
          f.phase = 1;
          f.count = 0;
          return accept();
        }
        if (f.phase == 2) {  // after a backslash
          if (!std::strchr("\"\\/bfnrt", c) || c == 0) return;
          f.phase = 1;
          return accept();
        }
        if (f.phase == 3) {  // inside a UTF-8 sequence
          if (c < 0x80 || c > 0xBF) return;
          if (--f.pending == 0) f.phase = 1;
          return accept();
        }
        if (c == '"') {
          if (f.count < n.min_length) return;
          s.frames.pop_back();
          return accept();
        }
        if (c < 0x20) return;
        if (n.max_length >= 0 && f.count >= n.max_length) return;
        if (c == '\\') {
          f.phase = 2;
        } else if (c >= 0x80) {
          if (c >= 0xC2 && c <= 0xDF) f.pending = 1;
          else if (c >= 0xE0 && c <= 0xEF) f.pending = 2;
          else if (c >= 0xF0 && c <= 0xF4) f.pending = 3;
          else return;
          f.phase = 3;
        }
        f.count++;
        return accept();
      }
      case NodeKind::kNumber: {
        const NumberShape& sh = n.number;
        Frame g = f;
        bool consumed = false;
        if (c == '-' && f.phase == 0) {
          g.flags |= 1;
          consumed = true;
        } else if (c >= '0' && c <= '9') {
          const int64_t d = c - '0';
          if (g.flags & 2) {
            if (g.count2 >= sh.frac_digits) return;
            g.b = g.b * 10 + d;
            g.count2++;
          } else {
            if ((g.count == 1 && g.a == 0) || g.count >= sh.max_int_digits) return;
            g.a = g.a * 10 + d;
            g.count++;
          }
          consumed = true;
        } else if (c == '.' && f.phase == 1 && sh.frac_digits > 0 && !(g.flags & 2) && g.count > 0) {
          g.flags |= 2;
          consumed = true;
        }
        if (consumed) {
          g.phase = 1;
          if (!number_viable(g, sh)) return;
          f = g;
          return accept();
        }
        if (f.phase != 1 || !number_can_end(f, sh)) return;
        s.frames.pop_back();
        continue;
      }
      case NodeKind::kObject:
      case NodeKind::kAnyObject: {
        const bool any = n.kind == NodeKind::kAnyObject;
        switch (f.phase) {
          case 0:
            if (c != '{') return;
            f.phase = 1;
            f.count = -1;
            return accept();
          case 1:  // after '{'
          case 6:  // after ','
            if (ws) return take_ws();
            if (c == '}' && f.phase == 1 && (any || can_close_object(n, f.count))) {
              s.frames.pop_back();
              return accept();
            }
            if (c != '"') return;
            if (any) {
              f.phase = 3;
              Frame key = start_frame(grammar_->any_string());
              key.phase = 1;
              s.frames.push_back(key);
              return accept();
            }
            f.alive = next_keys(n, f.count);
            if (!f.alive) return;
            f.phase = 2;
            f.count2 = 1;  // the key's opening quote
            return accept();
          case 2: {  // inside a listed key
            const size_t pos = static_cast<size_t>(f.count2);
            uint64_t next = 0;
            int32_t ended = -1;
            for (size_t j = 0; j < n.properties.size(); ++j) {
              if (!(f.alive >> j & 1)) continue;
              const std::string& k = n.properties[j].key_json;
              if (k.size() > pos && static_cast<uint8_t>(k[pos]) == c) {
                next |= 1ULL << j;
                if (k.size() == pos + 1) ended = static_cast<int32_t>(j);
              }
            }
            if (!next) return;
            f.alive = next;
            f.count2++;
            if (ended >= 0) {  // a closing quote: the key is this property's
              f.count = ended;
              f.alive = 0;
              f.count2 = 0;
              f.phase = 3;
            }
            return accept();
          }
          case 3:  // after the key
            if (ws) return take_ws();
            if (c != ':') return;
            f.phase = 4;
            return accept();
          case 4: {  // before the value
            if (ws) return take_ws();
            f.phase = 5;
            const GrammarNode* value = any ? grammar_->any_value() : n.properties[static_cast<size_t>(f.count)].value;
            s.frames.push_back(start_frame(value));
            continue;
          }
          case 5:  // after a value
            if (ws) return take_ws();
            if (c == ',' && (any || next_keys(n, f.count))) {
              f.phase = 6;
              return accept();
            }
            if (c == '}' && (any || can_close_object(n, f.count))) {
              s.frames.pop_back();
              return accept();
            }
            return;
        }
        return;
      }
      case NodeKind::kArray: {
        switch (f.phase) {
          case 0:
            if (c != '[') return;
            f.phase = 1;
            f.count = 0;
            return accept();
          case 1:  // after '['
            if (ws) return take_ws();
            if (c == ']') {
              if (n.min_items > 0) return;
              s.frames.pop_back();
              return accept();
            }
            if (n.max_items == 0) return;
            f.count = 1;
            f.phase = 2;
            s.frames.push_back(start_frame(n.items));
            continue;
          case 2:  // after an item
            if (ws) return take_ws();
            if (c == ',' && (n.max_items < 0 || f.count < n.max_items)) {
              f.phase = 3;
              return accept();
            }
            if (c == ']' && f.count >= n.min_items) {
              s.frames.pop_back();
              return accept();
            }
            return;
          case 3:  // after ','
            if (ws) return take_ws();
            f.count++;
            f.phase = 2;
            s.frames.push_back(start_frame(n.items));
            continue;
        }
        return;
      }
    }
    return;
  }
}

}  // namespace lancet::structured
