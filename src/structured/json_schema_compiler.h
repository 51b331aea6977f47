// JSON Schema -> Grammar. Supported: type (a name or a list of names), object (properties,
// required, additionalProperties: only the listed properties are generated, in the schema's
// order), array (items, minItems, maxItems), string (minLength, maxLength), number and
// integer (minimum, maximum, exclusiveMinimum, exclusiveMaximum in both the number and the
// draft-4 boolean forms), boolean, null, enum and const of any JSON values, anyOf and oneOf
// (matched as anyOf), $ref to "#", "#/$defs/..." or "#/definitions/...", and annotations
// (title, description, default, examples, ...), which are ignored. Properties are generated
// in the order the schema writes them (hence ordered_json). Any other keyword is an
// InvalidArgument naming the keyword and where it is, never silently dropped.
#pragma once

#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/grammar.h"

namespace lancet::structured {

struct SchemaCompileOptions {
  int32_t max_depth = 32;    // nesting of subschemas
  int32_t max_nodes = 4096;  // grammar nodes one schema may produce
};

StatusOr<std::unique_ptr<Grammar>> compile_json_schema(const nlohmann::ordered_json& schema,
                                                       const SchemaCompileOptions& options = {});

}  // namespace lancet::structured
