// The Llama 3.x tool-call parser: plain JSON calls, the <|python_tag|> prefix, ';'-separated
// calls, "arguments" for "parameters", and everything that must stay plain content
// (malformed or partial JSON, unknown functions, text around a call); and ToolCallStream,
// which holds streamed output only while it may still be a call.
#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

namespace lancet::server {
namespace {

const std::vector<std::string> kNames = {"get_weather", "get-time"};

TEST(ToolCallParser, PlainJsonCall) {
  auto calls = parse_tool_calls(R"(  {"name": "get_weather", "parameters": {"city": "Paris", "days": 2}} )", kNames);
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].name, "get_weather");
  EXPECT_EQ((*calls)[0].arguments, R"({"city":"Paris","days":2})");  // key order kept
  EXPECT_TRUE((*calls)[0].id.empty());
}

TEST(ToolCallParser, PythonTagPrefix) {
  auto calls = parse_tool_calls(R"(<|python_tag|>{"name": "get-time", "parameters": {}})", kNames);
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].name, "get-time");
  EXPECT_EQ((*calls)[0].arguments, "{}");
}

TEST(ToolCallParser, SemicolonSeparatedCalls) {
  auto calls = parse_tool_calls(
      R"({"name": "get_weather", "parameters": {"city": "a;b}"}}; {"name": "get-time", "arguments": {"tz": "UTC"}};)",
      kNames);
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0].arguments, R"({"city":"a;b}"})");  // ';' and '}' inside strings do not split
  EXPECT_EQ((*calls)[1].name, "get-time");
  EXPECT_EQ((*calls)[1].arguments, R"({"tz":"UTC"})");
}

TEST(ToolCallParser, ArgumentsIsASynonym) {
  auto calls = parse_tool_calls(R"({"name": "get_weather", "arguments": {"city": "Oslo"}})", kNames);
  ASSERT_TRUE(calls.has_value());
  EXPECT_EQ((*calls)[0].arguments, R"({"city":"Oslo"})");
}

TEST(ToolCallParser, AnythingElseIsContent) {
  const char* contents[] = {
      "",
      "Hello there",
      R"({"name": "get_weather", "parameters": {"city": "Par)",               // partial
      R"({"name": "get_weather", "parameters": {"city": }})",                 // malformed
      R"({"name": "send_mail", "parameters": {}})",                           // unknown function
      R"({"name": "get_weather"})",                                           // no parameters
      R"({"name": "get_weather", "parameters": "city=Paris"})",               // not an object
      R"({"name": 3, "parameters": {}})",
      R"(Sure: {"name": "get_weather", "parameters": {}})",                   // text before
      R"({"name": "get_weather", "parameters": {}} and more)",                // text after
      R"({"name": "get_weather", "parameters": {}}; {"name": "nope", "parameters": {}})",  // one unknown
      R"([{"name": "get_weather", "parameters": {}}])",
  };
  for (const char* c : contents) EXPECT_FALSE(parse_tool_calls(c, kNames).has_value()) << c;
}

TEST(ToolCallStream, AutoHoldsWhileOutputMayBeACall) {
  ToolCallStream s(/*enforced=*/false);
  EXPECT_EQ(s.feed("  "), "");
  EXPECT_EQ(s.feed("{\"na"), "");
  EXPECT_TRUE(s.holding());
  EXPECT_EQ(s.finish(), "  {\"na");
  EXPECT_FALSE(s.holding());

  ToolCallStream tag(false);
  EXPECT_EQ(tag.feed("<|pyth"), "");  // a prefix of the tag
  EXPECT_EQ(tag.feed("on_tag|>{"), "");
  EXPECT_TRUE(tag.holding());
}

TEST(ToolCallStream, AutoReleasesPlainTextAtOnce) {
  ToolCallStream s(false);
  EXPECT_EQ(s.feed("\n"), "");
  EXPECT_EQ(s.feed("Hi"), "\nHi");
  EXPECT_FALSE(s.holding());
  EXPECT_EQ(s.feed(" there"), " there");
  EXPECT_EQ(s.finish(), "");
}

TEST(ToolCallStream, EnforcedHoldsEverything) {
  ToolCallStream s(/*enforced=*/true);
  EXPECT_EQ(s.feed("Hi"), "");
  EXPECT_EQ(s.feed(" there"), "");
  EXPECT_EQ(s.finish(), "Hi there");
}

TEST(CallArgumentsStream, NameOnceThenArgumentsWithoutTheOuterBrace) {
  CallArgumentsStream s;
  EXPECT_FALSE(s.feed("{\"name\": \"get_wea").name_ready);
  EXPECT_FALSE(s.started());
  auto p = s.feed("ther\", \"parameters\": ");
  EXPECT_TRUE(p.name_ready);
  EXPECT_EQ(p.name, "get_weather");
  EXPECT_EQ(p.arguments, "");
  p = s.feed(" {\"city\": \"Pa");
  EXPECT_FALSE(p.name_ready);
  EXPECT_EQ(p.arguments, "{\"city\": \"Pa");  // the grammar's blank before it is dropped
  EXPECT_EQ(s.feed("ris\"}").arguments, "ris\"");  // '}' may close the outer object: held
  EXPECT_EQ(s.feed(" }").arguments, "");
  EXPECT_EQ(s.finish(), "}");  // the arguments' own close; the outer one is dropped
  std::string all = "{\"city\": \"Pa" + std::string("ris\"") + "}";
  EXPECT_EQ(all, R"({"city": "Paris"})");
}

TEST(CallArgumentsStream, BracesInsideTheArgumentsAreReleasedOnceFollowed) {
  CallArgumentsStream s;
  s.feed(R"({"name":"f","parameters":)");
  EXPECT_EQ(s.feed(R"({"a":{"b":1}})").arguments, R"({"a":{"b":1)");
  EXPECT_EQ(s.feed(R"(,"c":2})").arguments, R"(}},"c":2)");
  EXPECT_EQ(s.feed("}").arguments, "");
  EXPECT_EQ(s.finish(), "}");

  CallArgumentsStream cut;  // cut before the name: nothing started, nothing to finish
  cut.feed(R"({"name": "f)");
  EXPECT_FALSE(cut.started());
  EXPECT_EQ(cut.finish(), "");
}

}  // namespace
}  // namespace lancet::server
