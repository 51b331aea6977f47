// What a request constrains its output to (the server fills it from response_format,
// guided_json and guided_choice; constraint_cache.h compiles it).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lancet::structured {

struct OutputFormat {
  enum class Kind { kJsonObject, kJsonSchema, kChoice, kRegex };
  Kind kind = Kind::kJsonObject;
  nlohmann::ordered_json schema;     // kJsonSchema (properties in the order written)
  std::vector<std::string> choices;  // kChoice: the output is exactly one of these
  std::string pattern;               // kRegex: the whole output matches it
};

}  // namespace lancet::structured
