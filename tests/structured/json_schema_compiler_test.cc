// Unsupported schema features are errors naming the keyword and where it is.
#include "structured/json_schema_compiler.h"

#include <gtest/gtest.h>

namespace lancet::structured {
namespace {

std::string error_of(const char* text) {
  auto g = compile_json_schema(nlohmann::ordered_json::parse(text));
  return g.ok() ? "" : g.status().to_string();
}

TEST(JsonSchemaCompiler, UnsupportedKeywordsAreNamed) {
  EXPECT_NE(error_of(R"({"type":"string","pattern":"a+"})").find("'pattern'"), std::string::npos);
  const std::string nested = error_of(R"({"type":"object","properties":{"x":{"type":"string","format":"date"}}})");
  EXPECT_NE(nested.find("'format'"), std::string::npos) << nested;
  EXPECT_NE(nested.find("#/properties/x"), std::string::npos) << nested;
  EXPECT_NE(error_of(R"({"type":"number","multipleOf":2})").find("'multipleOf'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"array","prefixItems":[]})").find("'prefixItems'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"date"})").find("'date'"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"http://x/y"})").find("$ref"), std::string::npos);
}

TEST(JsonSchemaCompiler, InconsistentSchemasAreErrors) {
  EXPECT_NE(error_of(R"({"type":"integer","minimum":5,"maximum":4})"), "");
  EXPECT_NE(error_of(R"({"type":"integer","exclusiveMinimum":4,"exclusiveMaximum":5})"), "");
  EXPECT_NE(error_of(R"({"type":"array","minItems":3,"maxItems":2})"), "");
  EXPECT_NE(error_of(R"({"type":"object","properties":{},"required":["a"]})").find("'a'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"integer","minimum":1e20})"), "");
  EXPECT_NE(error_of("false"), "");
}

TEST(JsonSchemaCompiler, AnnotationsAreIgnored) {
  EXPECT_EQ(error_of(R"({"title":"t","description":"d","type":"object","properties":{"a":{"type":"string",
      "default":"x","examples":["y"]}},"additionalProperties":false,"$schema":"https://json-schema.org/draft/2020-12/schema"})"),
            "");
  EXPECT_EQ(error_of("{}"), "");
  EXPECT_EQ(error_of("true"), "");
}

}  // namespace
}  // namespace lancet::structured
