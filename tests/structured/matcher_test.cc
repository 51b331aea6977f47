// The character matcher over compiled schemas: viable and dead prefixes, completion, bounds,
// enums, nesting, arrays with item counts, bounded whitespace.
#include "structured/matcher.h"

#include <gtest/gtest.h>

#include "structured/json_schema_compiler.h"

namespace lancet::structured {
namespace {

std::unique_ptr<Grammar> schema(const char* text) {
  auto g = compile_json_schema(nlohmann::ordered_json::parse(text));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return std::move(g).value();
}

// Whether the whole text is accepted, and the matcher's answers after it.
struct Fed {
  bool viable;
  bool complete;
  bool done;
};
Fed feed(const Grammar& g, std::string_view text) {
  Matcher m(&g);
  for (char c : text)
    if (!m.feed(static_cast<uint8_t>(c))) return {false, false, false};
  return {true, m.complete(), m.done()};
}
bool accepts(const Grammar& g, std::string_view text) {
  const Fed f = feed(g, text);
  return f.viable && f.complete;
}
bool viable(const Grammar& g, std::string_view text) { return feed(g, text).viable; }

TEST(Matcher, ObjectWithRequiredAndOptionalProperties) {
  auto g = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"]})");
  EXPECT_TRUE(accepts(*g, R"({"b":"x"})"));
  EXPECT_TRUE(accepts(*g, R"({"a":1,"b":"x"})"));
  EXPECT_TRUE(accepts(*g, R"({"a": 12, "b": "hi"})"));
  EXPECT_TRUE(feed(*g, R"({"b":"x"})").done);
  EXPECT_FALSE(viable(*g, R"({})"));           // b is required
  EXPECT_FALSE(viable(*g, R"({"a":1})"));      // '}' before b
  EXPECT_FALSE(viable(*g, R"({"c")"));         // not a listed property
  EXPECT_FALSE(viable(*g, R"({"b":"x","a")"));  // schema order
  EXPECT_TRUE(viable(*g, R"({"a":1)"));
  EXPECT_FALSE(feed(*g, R"({"a":1)").complete);
  EXPECT_FALSE(viable(*g, R"({"a":"s")"));     // a is an integer
}

TEST(Matcher, WhitespaceIsBounded) {
  auto g = schema(R"({"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"]})");
  EXPECT_TRUE(accepts(*g, "{ \"a\" : true }"));
  EXPECT_FALSE(viable(*g, "{  \"a\""));  // two in a run
  EXPECT_FALSE(viable(*g, " {"));        // none before the document
  EXPECT_FALSE(viable(*g, "{\"a\":true} "));  // nor after it
}

TEST(Matcher, IntegerBounds) {
  auto g = schema(R"({"type":"integer","minimum":-5,"maximum":120})");
  EXPECT_TRUE(accepts(*g, "0"));
  EXPECT_TRUE(accepts(*g, "-5"));
  EXPECT_TRUE(accepts(*g, "120"));
  EXPECT_TRUE(accepts(*g, "99"));
  EXPECT_FALSE(viable(*g, "-6"));
  EXPECT_FALSE(viable(*g, "121"));
  EXPECT_FALSE(viable(*g, "1200"));
  EXPECT_TRUE(viable(*g, "12"));
  EXPECT_FALSE(viable(*g, "01"));   // no leading zeros
  EXPECT_FALSE(viable(*g, "1.5"));  // an integer
  EXPECT_FALSE(viable(*g, "-0.5"));
  EXPECT_FALSE(feed(*g, "-").complete);
  // 13 can still become 130? No: above 120, so "13" completes only as 13.
  EXPECT_TRUE(accepts(*g, "13"));
  EXPECT_FALSE(viable(*g, "130"));
}

TEST(Matcher, ExclusiveBoundsAndDecimals) {
  auto g = schema(R"({"type":"number","exclusiveMinimum":0,"maximum":1.5})");
  EXPECT_FALSE(accepts(*g, "0"));
  EXPECT_TRUE(viable(*g, "0"));  // 0.x is still possible
  EXPECT_TRUE(accepts(*g, "0.25"));
  EXPECT_TRUE(accepts(*g, "1.5"));
  EXPECT_TRUE(accepts(*g, "1"));
  EXPECT_FALSE(viable(*g, "1.6"));
  EXPECT_FALSE(viable(*g, "2"));
  EXPECT_FALSE(viable(*g, "-"));
  EXPECT_FALSE(viable(*g, "0.0000001"));  // 6 decimals at most
  EXPECT_FALSE(accepts(*g, "0.000000"));
  EXPECT_TRUE(accepts(*g, "0.000001"));
  auto draft4 = schema(R"({"type":"integer","minimum":10,"exclusiveMinimum":true,"maximum":12,"exclusiveMaximum":true})");
  EXPECT_TRUE(accepts(*draft4, "11"));
  EXPECT_FALSE(viable(*draft4, "10"));
  EXPECT_FALSE(viable(*draft4, "12"));
}

TEST(Matcher, EnumsAndConsts) {
  auto g = schema(R"({"enum":["red","green",1,10,null,{"k":[1]}]})");
  EXPECT_TRUE(accepts(*g, R"("red")"));
  EXPECT_TRUE(accepts(*g, "1"));
  EXPECT_TRUE(accepts(*g, "10"));
  EXPECT_TRUE(accepts(*g, "null"));
  EXPECT_TRUE(accepts(*g, R"({"k":[1]})"));
  EXPECT_FALSE(viable(*g, R"("blue")"));
  EXPECT_FALSE(viable(*g, "11"));
  EXPECT_TRUE(feed(*g, R"("red")").done);
  EXPECT_FALSE(feed(*g, "1").done);  // 10 may still follow
  auto obj = schema(R"({"type":"object","properties":{"c":{"enum":[1,12]},"d":{"const":"x"}},"required":["c","d"]})");
  EXPECT_TRUE(accepts(*obj, R"({"c":1,"d":"x"})"));
  EXPECT_TRUE(accepts(*obj, R"({"c":12,"d":"x"})"));
  EXPECT_FALSE(viable(*obj, R"({"c":2)"));
}

TEST(Matcher, ArraysWithItemCounts) {
  auto g = schema(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  EXPECT_FALSE(viable(*g, "[]"));
  EXPECT_TRUE(accepts(*g, "[1]"));
  EXPECT_TRUE(accepts(*g, "[1, 2, 3]"));
  EXPECT_FALSE(viable(*g, "[1,2,3,"));
  EXPECT_FALSE(viable(*g, "[1,]"));
  auto empty_ok = schema(R"({"type":"array","items":{"type":"string"},"maxItems":0})");
  EXPECT_TRUE(accepts(*empty_ok, "[]"));
  EXPECT_FALSE(viable(*empty_ok, "[\""));
}

TEST(Matcher, NestingAndStrings) {
  auto g = schema(R"({"type":"object","properties":{"p":{"type":"object","properties":{
      "tags":{"type":"array","items":{"type":"string","maxLength":3}},
      "q":{"type":"object","properties":{"r":{"type":"null"}},"required":["r"]}},"required":["tags","q"]}},
      "required":["p"]})");
  EXPECT_TRUE(accepts(*g, R"({"p":{"tags":["ab","c\"d"],"q":{"r":null}}})"));
  EXPECT_FALSE(viable(*g, R"({"p":{"tags":["abcd")"));  // longer than 3
  EXPECT_TRUE(accepts(*g, "{\"p\":{\"tags\":[\"\xc3\xa9t\xc3\xa9\"],\"q\":{\"r\":null}}}"));  // "été": 3 characters
  EXPECT_FALSE(viable(*g, "{\"p\":{\"tags\":[\"\x01"));   // control character
  EXPECT_FALSE(viable(*g, "{\"p\":{\"tags\":[\"\\x"));  // not an escape
  EXPECT_FALSE(viable(*g, "{\"p\":{\"tags\":[\"\xff"));   // not UTF-8
}

TEST(Matcher, AnyOfTypeListsAndRefs) {
  auto g = schema(R"({"anyOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                               {"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}]})");
  EXPECT_TRUE(accepts(*g, R"({"a":1})"));
  EXPECT_TRUE(accepts(*g, R"({"a":"s"})"));
  EXPECT_FALSE(viable(*g, R"({"a":true)"));
  auto t = schema(R"({"type":["string","null"]})");
  EXPECT_TRUE(accepts(*t, "null"));
  EXPECT_TRUE(accepts(*t, R"("x")"));
  auto r = schema(R"({"$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["kids"]}},
                      "$ref":"#/$defs/node"})");
  EXPECT_TRUE(accepts(*r, R"({"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]})"));
  EXPECT_FALSE(viable(*r, R"({"kids":[{"kids":[1)"));
}

TEST(Matcher, AnyJsonObject) {
  auto g = any_json_object_grammar();
  EXPECT_TRUE(accepts(*g, R"({})"));
  EXPECT_TRUE(accepts(*g, R"({"a":[1,-2.5,true,null,{"b":"c"}],"d":{}})"));
  EXPECT_FALSE(viable(*g, "["));
  EXPECT_FALSE(viable(*g, R"({"a":tru})"));
  EXPECT_FALSE(viable(*g, R"({a)"));
}

TEST(Matcher, Choices) {
  auto g = choice_grammar({"yes", "no", "yesterday"});
  EXPECT_TRUE(accepts(*g, "no"));
  EXPECT_TRUE(feed(*g, "no").done);
  EXPECT_TRUE(accepts(*g, "yes"));
  EXPECT_FALSE(feed(*g, "yes").done);  // "yesterday" may follow
  EXPECT_TRUE(accepts(*g, "yesterday"));
  EXPECT_FALSE(viable(*g, "yess"));
  EXPECT_FALSE(viable(*g, "nope"));
}

TEST(Matcher, FeedOfManyBytesIsAllOrNothing) {
  auto g = schema(R"({"type":"boolean"})");
  Matcher m(g.get());
  EXPECT_FALSE(m.feed(std::string_view("tx")));
  EXPECT_TRUE(m.feed(std::string_view("tr")));
  EXPECT_TRUE(m.feed(std::string_view("ue")));
  EXPECT_TRUE(m.done());
}

}  // namespace
}  // namespace lancet::structured
