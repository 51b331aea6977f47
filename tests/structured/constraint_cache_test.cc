// The per-model cache: a repeated format reuses its compiled grammar (and masks), formats are
// told apart, and bad formats are InvalidArgument with the reason.
#include "structured/constraint_cache.h"

#include <gtest/gtest.h>

namespace lancet::structured {
namespace {

std::shared_ptr<const TokenTrie> tiny_trie() {
  return std::make_shared<TokenTrie>(std::vector<std::string>{"", "{", "}", "\"a\"", ":", "1", "yes", "no", "[", "]"});
}

OutputFormat schema(const char* text) {
  OutputFormat f;
  f.kind = OutputFormat::Kind::kJsonSchema;
  f.schema = nlohmann::ordered_json::parse(text);
  return f;
}

TEST(ConstraintCache, ReusesCompiledGrammars) {
  ConstraintCache cache(tiny_trie());
  auto a = cache.constraint(schema(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = cache.constraint(schema(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(cache.num_grammars(), 1u);
  // Each constraint is its own state over the shared grammar.
  std::unique_ptr<TokenConstraint> s = (*a)->clone();
  EXPECT_TRUE(s->accept(1));  // {
  EXPECT_TRUE(s->accept(3));  // "a"
  EXPECT_TRUE(s->accept(4));  // :
  EXPECT_TRUE(s->accept(5));  // 1
  EXPECT_FALSE(s->done());
  EXPECT_TRUE(s->accept(2));  // }
  EXPECT_TRUE(s->done());
  EXPECT_FALSE((*b)->complete());
  OutputFormat choice;
  choice.kind = OutputFormat::Kind::kChoice;
  choice.choices = {"yes", "no"};
  ASSERT_TRUE(cache.constraint(choice).ok());
  ASSERT_TRUE(cache.constraint(OutputFormat{}).ok());  // json_object
  EXPECT_EQ(cache.num_grammars(), 3u);
}

TEST(ConstraintCache, BadFormatsAreErrors) {
  ConstraintCache cache(tiny_trie());
  auto bad = cache.constraint(schema(R"({"type":"string","pattern":"x"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'pattern'"), std::string::npos);
  OutputFormat choice;
  choice.kind = OutputFormat::Kind::kChoice;
  EXPECT_FALSE(cache.constraint(choice).ok());  // no choices
  choice.choices.assign(65, "x");
  EXPECT_FALSE(cache.constraint(choice).ok());
  EXPECT_EQ(cache.num_grammars(), 0u);
}

}  // namespace
}  // namespace lancet::structured
