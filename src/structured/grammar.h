// A compiled output grammar: a graph of nodes, JSON values (objects with ordered properties,
// arrays, strings, numbers on a decimal grid, literal alternatives, anyOf) built by
// json_schema_compiler.h or choice_grammar(), and the raw-text nodes of a context-free grammar
// (sequences, repetitions, character classes, literals, alternatives; rules refer to each
// other, recursively) built by gbnf_grammar.h; matched character by character by matcher.h.
// Nodes are owned by the Grammar; pointers between them stay valid while it lives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "structured/regex_dfa.h"

namespace lancet::structured {

enum class NodeKind {
  kObject,     // properties in schema order; only listed properties
  kAnyObject,  // any JSON object (string keys, any values)
  kArray,
  kString,
  kNumber,     // integer or decimal, no exponent, bounded digits
  kLiteral,    // one of a few exact byte strings (enum, const, true/false/null, a choice)
  kAnyOf,      // one of several nodes
  kAnyValue,   // any JSON value
  kRegex,      // raw text matching a regex (a byte DFA)
  kSequence,   // raw text: its nodes one after another
  kRepeat,     // raw text: items repeated min_items..max_items times
  kCharClass,  // raw text: one UTF-8 character in (or, negated, out of) code point ranges
};

struct GrammarNode;

struct Property {
  std::string key_json;  // the key as it is written: "\"name\""
  const GrammarNode* value = nullptr;
  bool required = false;
};

// Numbers are generated on a grid of 10^-frac_digits ("units"), with at most max_int_digits
// digits before the point; bounds are inclusive, in units.
struct NumberShape {
  bool integer = false;
  int32_t frac_digits = 0;
  int32_t max_int_digits = 15;
  int64_t lo_units = 0;
  int64_t hi_units = 0;
};

struct GrammarNode {
  NodeKind kind = NodeKind::kAnyValue;
  std::vector<Property> properties;          // kObject (at most kMaxAlternatives)
  const GrammarNode* items = nullptr;        // kArray
  int64_t min_items = 0, max_items = -1;     // kArray; -1 = unbounded
  int32_t min_length = 0, max_length = -1;   // kString, in characters; -1 = unbounded
  NumberShape number;                        // kNumber
  std::vector<std::string> literals;         // kLiteral (at most kMaxAlternatives)
  std::vector<const GrammarNode*> any_of;    // kAnyOf
  ByteDfa regex;                             // kRegex
  std::vector<const GrammarNode*> sequence;  // kSequence
  // kRepeat: items, min_items, max_items (-1 = unbounded); items is never nullable.
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kCharClass: inclusive code point ranges
  bool negated = false;                               // kCharClass: any character outside them
  bool nullable = false;  // raw-text nodes: matches the empty string (set by their builder)
};

// Literal alternatives and object properties are tracked in a 64-bit set while matching.
inline constexpr size_t kMaxAlternatives = 64;

class Grammar {
 public:
  Grammar();
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;

  GrammarNode* add(NodeKind kind);
  const GrammarNode* root() const { return root_; }
  void set_root(const GrammarNode* root) { root_ = root; }
  // Shared nodes of "any JSON value" (kAnyValue dispatches to them on the first character).
  const GrammarNode* any_object() const { return any_object_; }
  const GrammarNode* any_array() const { return any_array_; }
  const GrammarNode* any_string() const { return any_string_; }
  const GrammarNode* any_number() const { return any_number_; }
  const GrammarNode* any_keyword() const { return any_keyword_; }  // true, false, null
  const GrammarNode* any_value() const { return any_value_; }

 private:
  std::vector<std::unique_ptr<GrammarNode>> nodes_;
  const GrammarNode* root_ = nullptr;
  const GrammarNode *any_object_, *any_array_, *any_string_, *any_number_, *any_keyword_, *any_value_;
};

// The number shape of an unbounded JSON number (integer: no fraction).
NumberShape unbounded_number(bool integer);

// Any JSON object (response_format json_object).
std::unique_ptr<Grammar> any_json_object_grammar();
// Exactly one of `choices`, as raw text (vLLM's guided_choice); at most kMaxAlternatives.
std::unique_ptr<Grammar> choice_grammar(const std::vector<std::string>& choices);
// Raw text matching `pattern` as a whole (vLLM's guided_regex; regex_dfa.h says which syntax).
StatusOr<std::unique_ptr<Grammar>> regex_grammar(std::string_view pattern);

}  // namespace lancet::structured
