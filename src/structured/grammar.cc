// Grammar nodes and the grammars that need no schema.
#include "structured/grammar.h"

namespace lancet::structured {

NumberShape unbounded_number(bool integer) {
  NumberShape s;
  s.integer = integer;
  s.frac_digits = integer ? 0 : 6;
  s.max_int_digits = integer ? 15 : 12;  // magnitudes below 10^18 units: int64 arithmetic
  int64_t scale = 1;
  for (int i = 0; i < s.max_int_digits + s.frac_digits; ++i) scale *= 10;
  s.lo_units = -(scale - 1);
  s.hi_units = scale - 1;
  return s;
}

Grammar::Grammar() {
  GrammarNode* value = add(NodeKind::kAnyValue);
  GrammarNode* obj = add(NodeKind::kAnyObject);
  GrammarNode* arr = add(NodeKind::kArray);
  arr->items = value;
  GrammarNode* str = add(NodeKind::kString);
  GrammarNode* num = add(NodeKind::kNumber);
  num->number = unbounded_number(false);
  GrammarNode* kw = add(NodeKind::kLiteral);
  kw->literals = {"true", "false", "null"};
  any_value_ = value;
  any_object_ = obj;
  any_array_ = arr;
  any_string_ = str;
  any_number_ = num;
  any_keyword_ = kw;
}

GrammarNode* Grammar::add(NodeKind kind) {
  nodes_.push_back(std::make_unique<GrammarNode>());
  nodes_.back()->kind = kind;
  return nodes_.back().get();
}

std::unique_ptr<Grammar> any_json_object_grammar() {
  auto g = std::make_unique<Grammar>();
  g->set_root(g->any_object());
  return g;
}

std::unique_ptr<Grammar> choice_grammar(const std::vector<std::string>& choices) {
  auto g = std::make_unique<Grammar>();
  GrammarNode* lit = g->add(NodeKind::kLiteral);
  lit->literals = choices;
  g->set_root(lit);
  return g;
}

StatusOr<std::unique_ptr<Grammar>> regex_grammar(std::string_view pattern) {
  ASSIGN_OR_RETURN(ByteDfa dfa, compile_regex(pattern));
  auto g = std::make_unique<Grammar>();
  GrammarNode* n = g->add(NodeKind::kRegex);
  n->regex = std::move(dfa);
  g->set_root(n);
  return g;
}

}  // namespace lancet::structured
