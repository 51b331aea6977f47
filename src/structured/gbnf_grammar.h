// Context-free output grammars in GBNF, the notation of llama.cpp's grammars and of vLLM's
// guided_grammar (its xgrammar backend reads the same EBNF):
//
//   root   ::= answer ("," ws answer)*
//   answer ::= "yes" | "no" | [0-9]+ ("." [0-9]{1,3})?
//   ws     ::= [ \t\n]*          # a comment
//
// Rules `name ::= alternatives` (names of letters, digits, '-' and '_'; a rule may continue over
// several lines: the next rule starts where a name is followed by ::=), alternatives separated
// by '|', sequences of elements: "literals" (escapes \n \r \t \\ \" \' \[ \] \- \^ \xHH \uHHHH
// \UHHHHHHHH), character classes [a-z0-9_] and [^...] over Unicode code points, '.' (any
// character), ( groups ), rule references, each optionally followed by * + ? {m} {m,} {m,n}
// {,n}. The output must match the rule `root` as a whole. Rules may refer to each other
// recursively, except where a rule could reach itself before consuming a character (left
// recursion: rewrite it as repetition), and an unbounded repetition must not repeat something
// that can match the empty string; both are an InvalidArgument naming the rule, as is any
// syntax error (with its line).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace lancet::structured {

struct GbnfOptions {
  size_t max_text = 64 * 1024;  // bytes of grammar text
  size_t max_rules = 1024;
  size_t max_nodes = 64 * 1024;
  int64_t max_repeat = 10000;   // m and n of {m,n}
  std::string root = "root";    // the start rule
};

StatusOr<std::unique_ptr<Grammar>> gbnf_grammar(std::string_view text, const GbnfOptions& options = {});

}  // namespace lancet::structured
