// GBNF text to grammar nodes: a recursive-descent parser, then the analyses the matcher relies
// on (which nodes match the empty string, no left recursion, no unbounded repetition of what
// can be empty).
#include "structured/gbnf_grammar.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/utf8_encode.h"

namespace lancet::structured {
namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  Parser(std::string_view text, const GbnfOptions& options, Grammar* g) : t_(text), o_(options), g_(g) {}

  Status parse() {
    skip_space();
    while (pos_ < t_.size()) {
      const size_t at = pos_;
      std::string name = read_name();
      if (name.empty()) return error(at, "a rule name (letters, digits, '-', '_')");
      skip_space();
      if (t_.substr(pos_, 3) != "::=") return error(pos_, "'::=' after the rule name '" + name + "'");
      pos_ += 3;
      if (defined_.count(name)) return error(at, "rule '" + name + "' is defined twice");
      defined_.insert(name);
      if (defined_.size() > o_.max_rules) return error(at, "more than " + std::to_string(o_.max_rules) + " rules");
      GrammarNode* rule = rule_node(name);
      RETURN_IF_ERROR(parse_alternatives(/*nested=*/false, &rule->any_of));
      skip_space();
    }
    for (const auto& [name, node] : rules_)
      if (!defined_.count(name)) return InvalidArgument("grammar: rule '" + name + "' is used but not defined");
    if (!defined_.count(o_.root)) return InvalidArgument("grammar: no rule '" + o_.root + "' (the start rule)");
    if (nodes_.size() > o_.max_nodes)
      return InvalidArgument("grammar: more than " + std::to_string(o_.max_nodes) + " elements");
    compute_nullable();
    RETURN_IF_ERROR(check_repeats());
    RETURN_IF_ERROR(check_left_recursion());
    g_->set_root(rules_.at(o_.root));
    return OkStatus();
  }

 private:
  Status error(size_t at, const std::string& expected) const {
    const size_t line = 1 + static_cast<size_t>(std::count(t_.begin(), t_.begin() + static_cast<ptrdiff_t>(std::min(at, t_.size())), '\n'));
    const std::string near(t_.substr(std::min(at, t_.size()), 16));
    return InvalidArgument("grammar: line " + std::to_string(line) + ": expected " + expected +
                           (near.empty() ? std::string(" at the end") : " near '" + near + "'"));
  }

  GrammarNode* add(NodeKind kind) {
    GrammarNode* n = g_->add(kind);
    nodes_.push_back(n);
    return n;
  }

  GrammarNode* rule_node(const std::string& name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    GrammarNode* n = add(NodeKind::kAnyOf);
    rules_.emplace(name, n);
    rule_names_.emplace(n, name);
    return n;
  }

  // Spaces, tabs, newlines and comments.
  void skip_space() {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t b = pos_;
    while (pos_ < t_.size() && name_char(t_[pos_])) ++pos_;
    return std::string(t_.substr(b, pos_ - b));
  }

  // At a name followed by ::= : the next rule starts here.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < t_.size() && name_char(t_[p])) ++p;
    if (p == pos_) return false;
    while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\t' || t_[p] == '\n' || t_[p] == '\r')) ++p;
    return t_.substr(p, 3) == "::=";
  }

  Status parse_alternatives(bool nested, std::vector<const GrammarNode*>* alts) {
    for (;;) {
      const GrammarNode* seq = nullptr;
      RETURN_IF_ERROR(parse_sequence(nested, &seq));
      alts->push_back(seq);
      skip_space();
      if (pos_ < t_.size() && t_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return OkStatus();
    }
  }

  // Elements up to '|', ')' (nested), the next rule or the end; one element is itself, none
  // the empty literal.
  Status parse_sequence(bool nested, const GrammarNode** out) {
    std::vector<const GrammarNode*> items;
    for (;;) {
      skip_space();
      if (pos_ >= t_.size() || t_[pos_] == '|' || (t_[pos_] == ')' && nested) || at_rule_start()) break;
      const GrammarNode* e = nullptr;
      RETURN_IF_ERROR(parse_element(&e));
      RETURN_IF_ERROR(parse_postfix(&e));
      items.push_back(e);
    }
    if (items.size() == 1) {
      *out = items[0];
    } else if (items.empty()) {
      GrammarNode* empty = add(NodeKind::kLiteral);
      empty->literals = {""};
      *out = empty;
    } else {
      GrammarNode* seq = add(NodeKind::kSequence);
      seq->sequence = std::move(items);
      *out = seq;
    }
    return OkStatus();
  }

  Status parse_element(const GrammarNode** out) {
    const size_t at = pos_;
    const char c = t_[pos_];
    if (c == '"') {
      ++pos_;
      std::string bytes;
      while (pos_ < t_.size() && t_[pos_] != '"') {
        uint32_t cp = 0;
        bool escaped = false;
        RETURN_IF_ERROR(read_char(&cp, &escaped));
        if (escaped) utf8_append_codepoint(cp, &bytes);
        else bytes.push_back(static_cast<char>(cp));  // raw bytes of the text as they are
      }
      if (pos_ >= t_.size()) return error(at, "a closing '\"'");
      ++pos_;
      GrammarNode* lit = add(NodeKind::kLiteral);
      lit->literals = {bytes};
      *out = lit;
      return OkStatus();
    }
    if (c == '[') return parse_class(out);
    if (c == '.') {
      ++pos_;
      GrammarNode* any = add(NodeKind::kCharClass);
      any->negated = true;
      *out = any;
      return OkStatus();
    }
    if (c == '(') {
      ++pos_;
      GrammarNode* group = add(NodeKind::kAnyOf);
      RETURN_IF_ERROR(parse_alternatives(/*nested=*/true, &group->any_of));
      skip_space();
      if (pos_ >= t_.size() || t_[pos_] != ')') return error(at, "a closing ')' for this group");
      ++pos_;
      *out = group->any_of.size() == 1 ? group->any_of[0] : group;
      return OkStatus();
    }
    if (name_char(c)) {
      *out = rule_node(read_name());
      return OkStatus();
    }
    return error(at, "a literal, a character class, '.', '(' or a rule name");
  }

  // One character of a literal or class: an escape (its code point, escaped = true) or one raw
  // byte (escaped = false).
  Status read_char(uint32_t* cp, bool* escaped) {
    const size_t at = pos_;
    const char c = t_[pos_++];
    *escaped = c == '\\';
    if (!*escaped) {
      *cp = static_cast<uint8_t>(c);
      return OkStatus();
    }
    if (pos_ >= t_.size()) return error(at, "an escape after '\\'");
    const char e = t_[pos_++];
    int digits = 0;
    switch (e) {
      case 'n': *cp = '\n'; return OkStatus();
      case 'r': *cp = '\r'; return OkStatus();
      case 't': *cp = '\t'; return OkStatus();
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.': case '|':
      case '(': case ')': case '*': case '+': case '?': case '{': case '}':
        *cp = static_cast<uint8_t>(e);
        return OkStatus();
      case 'x': digits = 2; break;
      case 'u': digits = 4; break;
      case 'U': digits = 8; break;
      default:
        return error(at, "a known escape (\\n \\r \\t \\\\ \\\" \\' \\[ \\] \\- \\^ \\xHH \\uHHHH \\UHHHHHHHH)");
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int h = pos_ < t_.size() ? hex_value(t_[pos_]) : -1;
      if (h < 0) return error(at, std::to_string(digits) + " hex digits after \\" + std::string(1, e));
      v = v * 16 + static_cast<uint32_t>(h);
      ++pos_;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return error(at, "a Unicode scalar value");
    *cp = v;
    return OkStatus();
  }

  // A raw character of a class: a whole UTF-8 character, decoded.
  Status read_class_char(uint32_t* cp) {
    const size_t at = pos_;
    bool escaped = false;
    RETURN_IF_ERROR(read_char(cp, &escaped));
    if (escaped || *cp < 0x80) return OkStatus();
    const uint32_t lead = *cp;
    int more = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : -1;
    if (more < 0 || lead > 0xF4) return error(at, "valid UTF-8");
    uint32_t v = lead & (0x3Fu >> more);
    for (; more > 0; --more) {
      if (pos_ >= t_.size() || (static_cast<uint8_t>(t_[pos_]) & 0xC0) != 0x80) return error(at, "valid UTF-8");
      v = (v << 6) | (static_cast<uint8_t>(t_[pos_++]) & 0x3Fu);
    }
    *cp = v;
    return OkStatus();
  }

  Status parse_class(const GrammarNode** out) {
    const size_t at = pos_++;
    GrammarNode* cls = add(NodeKind::kCharClass);
    if (pos_ < t_.size() && t_[pos_] == '^') {
      cls->negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (pos_ < t_.size() && t_[pos_] != ']') {
      uint32_t lo = 0, hi = 0;
      RETURN_IF_ERROR(read_class_char(&lo));
      hi = lo;
      if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
        ++pos_;
        RETURN_IF_ERROR(read_class_char(&hi));
        if (hi < lo) return error(at, "a range from low to high in this class");
      }
      ranges.emplace_back(lo, hi);
    }
    if (pos_ >= t_.size()) return error(at, "a closing ']'");
    ++pos_;
    if (ranges.empty() && !cls->negated) return error(at, "a class with at least one character");
    // Sorted and merged: the matcher walks them in order.
    std::sort(ranges.begin(), ranges.end());
    for (const auto& r : ranges) {
      if (!cls->ranges.empty() && r.first <= cls->ranges.back().second + 1)
        cls->ranges.back().second = std::max(cls->ranges.back().second, r.second);
      else
        cls->ranges.push_back(r);
    }
    *out = cls;
    return OkStatus();
  }

  Status read_count(int64_t* v) {
    const size_t at = pos_;
    int64_t n = 0;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
      n = n * 10 + (t_[pos_++] - '0');
      if (n > o_.max_repeat) return error(at, "a repetition count of at most " + std::to_string(o_.max_repeat));
    }
    *v = pos_ > at ? n : -1;
    return OkStatus();
  }

  Status parse_postfix(const GrammarNode** e) {
    for (;;) {
      if (pos_ >= t_.size()) return OkStatus();
      const char c = t_[pos_];
      int64_t lo = 0, hi = -1;
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        lo = 1;
      } else if (c == '?') {
        ++pos_;
        hi = 1;
      } else if (c == '{') {
        const size_t at = pos_++;
        skip_space();
        RETURN_IF_ERROR(read_count(&lo));
        skip_space();
        if (pos_ < t_.size() && t_[pos_] == ',') {
          ++pos_;
          skip_space();
          RETURN_IF_ERROR(read_count(&hi));
        } else {
          if (lo < 0) return error(at, "{m}, {m,}, {m,n} or {,n}");
          hi = lo;
        }
        skip_space();
        if (pos_ >= t_.size() || t_[pos_] != '}') return error(at, "a closing '}'");
        ++pos_;
        if (lo < 0) lo = 0;
        if (hi >= 0 && hi < lo) return error(at, "{m,n} with m <= n");
      } else {
        return OkStatus();
      }
      GrammarNode* rep = add(NodeKind::kRepeat);
      rep->items = *e;
      rep->min_items = lo;
      rep->max_items = hi;
      *e = rep;
    }
  }

  void compute_nullable() {
    for (bool changed = true; changed;) {
      changed = false;
      for (GrammarNode* n : nodes_) {
        if (n->nullable) continue;
        bool v = false;
        switch (n->kind) {
          case NodeKind::kLiteral:
            v = std::any_of(n->literals.begin(), n->literals.end(), [](const std::string& l) { return l.empty(); });
            break;
          case NodeKind::kSequence:
            v = std::all_of(n->sequence.begin(), n->sequence.end(), [](const GrammarNode* c) { return c->nullable; });
            break;
          case NodeKind::kAnyOf:
            v = std::any_of(n->any_of.begin(), n->any_of.end(), [](const GrammarNode* c) { return c->nullable; });
            break;
          case NodeKind::kRepeat:
            v = n->min_items == 0 || n->items->nullable;
            break;
          default:
            break;
        }
        if (v) n->nullable = changed = true;
      }
    }
  }

  // A repetition of a node that matches the empty string may repeat without consuming: a
  // bounded one still ends on its count (the matcher counts every repetition), an unbounded one
  // is refused.
  Status check_repeats() {
    for (GrammarNode* n : nodes_) {
      if (n->kind != NodeKind::kRepeat || !n->items->nullable) continue;
      if (n->max_items < 0)
        return InvalidArgument("grammar: an unbounded repetition (*, + or {m,}) of " + describe(n->items) +
                               ", which can match the empty string; make the repeated part non-empty");
    }
    return OkStatus();
  }

  std::string describe(const GrammarNode* n) const {
    auto it = rule_names_.find(n);
    return it != rule_names_.end() ? "rule '" + it->second + "'" : std::string("a group");
  }

  // The nodes a match of n can start with before consuming a character.
  void leftmost(const GrammarNode* n, std::vector<const GrammarNode*>* out) const {
    switch (n->kind) {
      case NodeKind::kAnyOf:
        for (const GrammarNode* a : n->any_of) out->push_back(a);
        break;
      case NodeKind::kSequence:
        for (const GrammarNode* c : n->sequence) {
          out->push_back(c);
          if (!c->nullable) break;
        }
        break;
      case NodeKind::kRepeat:
        out->push_back(n->items);
        break;
      default:
        break;
    }
  }

  // A rule that reaches itself through leftmost positions would recurse without consuming.
  Status check_left_recursion() const {
    for (const auto& [name, rule] : rules_) {
      std::set<const GrammarNode*> seen;
      std::vector<const GrammarNode*> todo;
      leftmost(rule, &todo);
      while (!todo.empty()) {
        const GrammarNode* n = todo.back();
        todo.pop_back();
        if (n == rule)
          return InvalidArgument("grammar: rule '" + name +
                                 "' is left-recursive (it can reach itself before matching a character); "
                                 "write the repetition with * or + instead");
        if (!seen.insert(n).second) continue;
        leftmost(n, &todo);
      }
    }
    return OkStatus();
  }

  std::string_view t_;
  const GbnfOptions& o_;
  Grammar* g_;
  size_t pos_ = 0;
  std::vector<GrammarNode*> nodes_;
  std::map<std::string, GrammarNode*> rules_;
  std::map<const GrammarNode*, std::string> rule_names_;
  std::set<std::string> defined_;
};

}  // namespace

StatusOr<std::unique_ptr<Grammar>> gbnf_grammar(std::string_view text, const GbnfOptions& options) {
  if (text.size() > options.max_text)
    return InvalidArgument("grammar: longer than " + std::to_string(options.max_text) + " bytes");
  auto g = std::make_unique<Grammar>();
  Parser p(text, options, g.get());
  RETURN_IF_ERROR(p.parse());
  return g;
}

}  // namespace lancet::structured
