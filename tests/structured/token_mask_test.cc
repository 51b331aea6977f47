// The trie walk's mask against brute force (feed every token's bytes to a copy of the state),
// over a small vocabulary, along documents of several grammars; and the constraint's
// end-of-document answers.
#include "structured/token_mask.h"

#include <gtest/gtest.h>

#include <random>

#include "structured/grammar_constraint.h"
#include "structured/json_schema_compiler.h"

namespace lancet::structured {
namespace {

std::vector<std::string> small_vocab() {
  std::vector<std::string> v = {"", "{", "}", "{\"", "\":", "\"", ",", ", ", " ", "\n", "[", "]", "[]", "{}", "a", "ab",
                                "abc", "\"a", "\"ab", "\":\"", "1", "12", "-", "-1", "0", ".", ".5", "0.", "5", "9",
                                "99", "true", "tr", "ue", "null", "false", "fa", "lse", "\",\"", "\"}", "}}", "]}",
                                "\"name", "name", "\"age\":", "age", "x", "\xc3", "\xa9", "\xc3\xa9", "\\", "\\n", "\"\"",
                                "1,", "2]", "\" ", ": ", "tags", "\"tags\":[", "\"red\"", "red", "green", "e"};
  return v;
}

std::vector<uint32_t> brute_force(const Matcher& m, const TokenTrie& trie) {
  std::vector<uint32_t> mask(static_cast<size_t>((trie.vocab_size() + 31) / 32), 0u);
  for (int32_t id = 0; id < trie.vocab_size(); ++id) {
    Matcher c = m;
    const std::string_view b = trie.token_bytes(id);
    if (!b.empty() && c.feed(b)) mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  }
  return mask;
}

TEST(TokenTrie, EveryTokenIsFoundOnce) {
  TokenTrie trie(small_vocab());
  std::vector<int> seen(small_vocab().size(), 0);
  for (int32_t id : trie.token_ids()) seen[static_cast<size_t>(id)]++;
  EXPECT_EQ(seen[0], 0);  // no bytes: in no node
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << i;
  // Node paths spell the tokens.
  const auto& nodes = trie.nodes();
  std::vector<std::string> path(nodes.size());
  std::vector<uint32_t> stack = {0};
  for (uint32_t i = 1; i < nodes.size(); ++i) {
    while (nodes[stack.back()].end <= i) stack.pop_back();
    path[i] = path[stack.back()] + static_cast<char>(nodes[i].byte);
    for (uint32_t t = nodes[i].tok_begin; t < nodes[i].tok_end; ++t)
      EXPECT_EQ(path[i], trie.token_bytes(trie.token_ids()[t]));
    stack.push_back(i);
  }
}

// Walks random documents token by token, comparing masks at every step.
void check_grammar(const Grammar& g, const TokenTrie& trie, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int doc = 0; doc < 20; ++doc) {
    Matcher m(&g);
    for (int step = 0; step < 40; ++step) {
      std::vector<uint32_t> mask;
      compute_token_mask(m, trie, &mask);
      ASSERT_EQ(mask, brute_force(m, trie)) << "step " << step;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < trie.vocab_size(); ++id)
        if (mask[static_cast<size_t>(id) >> 5] >> (id & 31) & 1) allowed.push_back(id);
      if (allowed.empty()) break;
      ASSERT_TRUE(m.feed(trie.token_bytes(allowed[rng() % allowed.size()])));
      if (m.done()) break;
    }
  }
}

TEST(TokenMask, MatchesBruteForce) {
  TokenTrie trie(small_vocab());
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},"age":{"type":"integer","minimum":0,"maximum":99}},"required":["name","age"]})",
      R"({"type":"object","properties":{"tags":{"type":"array","items":{"enum":["red","green"]},"maxItems":3}},"required":["tags"]})",
      R"({"type":"array","items":{"type":"number","minimum":-1,"maximum":12.5},"minItems":1,"maxItems":4})",
      R"({"anyOf":[{"type":"boolean"},{"type":"null"},{"type":"string"}]})",
  };
  uint32_t seed = 1;
  for (const char* s : schemas) {
    auto g = compile_json_schema(nlohmann::ordered_json::parse(s));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    check_grammar(**g, trie, seed++);
  }
  check_grammar(*any_json_object_grammar(), trie, 99);
}

// A long bounded string shares one cached mask while no token can reach its bound, and the
// masks near the bound still come out right (against brute force).
TEST(GrammarConstraint, LongBoundedStringsShareMasks) {
  auto trie = std::make_shared<TokenTrie>(small_vocab());
  auto g = compile_json_schema(nlohmann::ordered_json::parse(R"({"type":"string","minLength":2,"maxLength":40})"));
  ASSERT_TRUE(g.ok());
  auto compiled = std::make_shared<CompiledGrammar>(std::move(g).value(), trie);
  GrammarConstraint c(compiled);
  int32_t quote = -1, abc = -1;
  for (int32_t id = 0; id < trie->vocab_size(); ++id) {
    if (trie->token_bytes(id) == "\"") quote = id;
    if (trie->token_bytes(id) == "abc") abc = id;
  }
  ASSERT_TRUE(c.accept(quote));
  std::vector<uint32_t> mask;
  size_t cached_before = 0;
  for (int step = 0; step < 13; ++step) {  // 39 characters
    c.allowed_tokens(trie->vocab_size(), &mask);
    ASSERT_EQ(mask, brute_force(c.matcher(), *trie)) << step;
    if (step == 2) cached_before = compiled->cached_masks();
    ASSERT_TRUE(c.accept(abc));
  }
  // Characters 3..(40 - longest token) had one state key between them.
  EXPECT_EQ(compiled->cached_masks(), cached_before + 2);  // only 33 and 36 characters are new
  c.allowed_tokens(trie->vocab_size(), &mask);
  EXPECT_EQ(mask, brute_force(c.matcher(), *trie));
  EXPECT_FALSE(c.accept(abc));  // 42 characters: too long
}

TEST(GrammarConstraint, MasksAcceptsAndEnds) {
  auto trie = std::make_shared<TokenTrie>(small_vocab());
  auto compiled = std::make_shared<CompiledGrammar>(choice_grammar({"red", "green"}), trie);
  GrammarConstraint c(compiled);
  std::vector<uint32_t> mask;
  c.allowed_tokens(trie->vocab_size() + 40, &mask);
  EXPECT_EQ(mask.size(), static_cast<size_t>((trie->vocab_size() + 40 + 31) / 32));
  auto allowed = [&](std::string_view tok) {
    for (int32_t id = 0; id < trie->vocab_size(); ++id)
      if (trie->token_bytes(id) == tok) return (mask[static_cast<size_t>(id) >> 5] >> (id & 31) & 1) != 0;
    return false;
  };
  EXPECT_TRUE(allowed("red"));
  EXPECT_TRUE(allowed("green"));
  EXPECT_FALSE(allowed("e"));  // starts neither
  EXPECT_FALSE(allowed("x"));
  std::unique_ptr<TokenConstraint> copy = c.clone();
  int32_t red = -1;
  for (int32_t id = 0; id < trie->vocab_size(); ++id)
    if (trie->token_bytes(id) == "red") red = id;
  EXPECT_TRUE(copy->accept(red));
  EXPECT_TRUE(copy->done());
  EXPECT_FALSE(c.complete());  // the original is unchanged
  EXPECT_FALSE(c.accept(0));   // a token without bytes
  EXPECT_GE(compiled->cached_masks(), 1u);
}

}  // namespace
}  // namespace lancet::structured
