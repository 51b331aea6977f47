// What a request constrains its output to (the server fills it from response_format,
// guided_json, guided_choice, guided_regex and guided_grammar; constraint_cache.h compiles it).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lancet::structured {

struct OutputFormat {
  enum class Kind { kJsonObject, kJsonSchema, kChoice, kRegex, kGrammar };
  Kind kind = Kind::kJsonObject;
  nlohmann::ordered_json schema;     // kJsonSchema (properties in the order written)
  std::vector<std::string> choices;  // kChoice: the output is exactly one of these
  std::string pattern;               // kRegex: the whole output matches it
  std::string grammar;               // kGrammar: GBNF text (gbnf_grammar.h); the output matches its root rule
};

}  // namespace lancet::structured
