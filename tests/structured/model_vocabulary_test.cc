// Masks over real vocabularies (SmolLM2, the default model: byte-level BPE, 49152 tokens; and
// Llama 3, 128256 tokens, for the walk's worst case, a string body):
// token bytes come back from the byte-level mapping ("Ġ" is a space), greedy decoding under a
// schema's mask always yields a valid document, and a repeated state's mask comes from the cache.
#include <gtest/gtest.h>

#include <chrono>

#include "structured/grammar_constraint.h"
#include "structured/json_schema_compiler.h"
#include "test_paths.h"
#include "tokenizer/model_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lancet::structured {
namespace {

std::shared_ptr<const TokenTrie> model_trie(const Tokenizer& tok) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (!tok.is_special(id)) bytes[static_cast<size_t>(id)] = std::string(tok.token_bytes(id));
  return std::make_shared<TokenTrie>(std::move(bytes));
}

bool allowed(const std::vector<uint32_t>& mask, int32_t id) { return mask[static_cast<size_t>(id) >> 5] >> (id & 31) & 1; }

TEST(ModelVocabulary, MasksOverSmolLm2) {
  const std::string model = testing::default_model();
  ASSERT_FALSE(model.empty()) << "default model missing: run tools/fetch_model.sh";
  auto b = load_tokenizer_bundle(model);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const Tokenizer& tok = *b->tokenizer;
  auto trie = model_trie(tok);
  auto g = compile_json_schema(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"n":{"type":"integer","minimum":0,"maximum":50}},"required":["name","n"]})"));
  ASSERT_TRUE(g.ok());
  auto compiled = std::make_shared<CompiledGrammar>(std::move(g).value(), trie);
  GrammarConstraint c(compiled);
  std::vector<uint32_t> mask;
  const auto t0 = std::chrono::steady_clock::now();
  c.allowed_tokens(tok.vocab_size(), &mask);
  const double first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const auto id_of = [&](const char* spelling) { return tok.token_to_id(spelling).value_or(-1); };
  ASSERT_GE(id_of("{"), 0);
  EXPECT_TRUE(allowed(mask, id_of("{")));
  EXPECT_FALSE(allowed(mask, id_of("Ġ{")));  // " {": no whitespace before the document
  EXPECT_FALSE(allowed(mask, tok.special_ids().eos));
  // Walk a document token by token with the encoder's tokens: each is allowed when it comes.
  const std::string doc = R"({"name": "Bob", "n": 42})";
  for (int32_t id : tok.encode(doc)) {
    c.allowed_tokens(tok.vocab_size(), &mask);
    ASSERT_TRUE(allowed(mask, id)) << "token " << id << " '" << tok.token_bytes(id) << "'";
    ASSERT_TRUE(c.accept(id));
  }
  EXPECT_TRUE(c.done());
  // Greedy over a fixed score (lowest id first) under the mask ends in a valid document.
  GrammarConstraint greedy(compiled);
  int steps = 0;
  for (; !greedy.done() && steps < 64; ++steps) {
    greedy.allowed_tokens(tok.vocab_size(), &mask);
    int32_t pick = -1;
    for (int32_t id = tok.vocab_size() - 1; id >= 0; --id)
      if (allowed(mask, id)) pick = id;
    ASSERT_GE(pick, 0);
    ASSERT_TRUE(greedy.accept(pick));
  }
  EXPECT_TRUE(greedy.done()) << steps;
  // The start state's mask is cached now.
  const auto t1 = std::chrono::steady_clock::now();
  GrammarConstraint(compiled).allowed_tokens(tok.vocab_size(), &mask);
  const double cached_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_LT(cached_ms, first_ms + 1.0);
  std::printf("first mask %.2f ms, cached %.3f ms, %zu masks cached\n", first_ms, cached_ms, compiled->cached_masks());
}

// Llama 3's 128256-token vocabulary: a string body admits most tokens, the walk's worst case.
TEST(ModelVocabulary, StringBodyMaskOverLlama3) {
  auto t = Tokenizer::from_json_file(testing::shared_dir() + "/models/llama3-tokenizer/tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto trie = model_trie(*t);
  auto g = compile_json_schema(nlohmann::ordered_json::parse(R"({"type":"object","properties":{"s":{"type":"string"}},"required":["s"]})"));
  ASSERT_TRUE(g.ok());
  auto compiled = std::make_shared<CompiledGrammar>(std::move(g).value(), trie);
  GrammarConstraint c(compiled);
  for (int32_t id : t->encode("{\"s\": \"")) ASSERT_TRUE(c.accept(id));
  std::vector<uint32_t> mask;
  const auto t0 = std::chrono::steady_clock::now();
  c.allowed_tokens(t->vocab_size(), &mask);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  int64_t n = 0;
  for (uint32_t w : mask) n += __builtin_popcount(w);
  EXPECT_GT(n, 100000);  // nearly every token fits inside a string
  int32_t newline = -1, word = -1, quote_newline = -1;
  for (int32_t id = 0; id < t->vocab_size(); ++id) {
    if (t->token_bytes(id) == "\n") newline = id;
    if (t->token_bytes(id) == " hello") word = id;
    if (t->token_bytes(id) == "\"\n") quote_newline = id;
  }
  ASSERT_GE(newline, 0);
  ASSERT_GE(word, 0);
  ASSERT_GE(quote_newline, 0);
  EXPECT_FALSE(allowed(mask, newline));      // a raw control character never fits in a string
  EXPECT_TRUE(allowed(mask, word));
  EXPECT_TRUE(allowed(mask, quote_newline));  // closes the string; one newline may follow
  for (int32_t id : t->encode("hello world\"}")) {
    c.allowed_tokens(t->vocab_size(), &mask);
    ASSERT_TRUE(allowed(mask, id)) << t->token_bytes(id);
    ASSERT_TRUE(c.accept(id));
  }
  EXPECT_TRUE(c.done());
  std::printf("string-body mask over %lld tokens: %.1f ms, %lld allowed\n", static_cast<long long>(t->vocab_size()), ms,
              static_cast<long long>(n));
}

}  // namespace
}  // namespace lancet::structured
