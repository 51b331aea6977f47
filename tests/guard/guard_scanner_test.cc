// GuardScanner: block/flag, allow-list spans, language scopes, keywords and regexes split
// across chunks, and that safe_end() never releases a byte of a blocked match.
#include "guard/guard_scanner.h"

#include <random>

#include <gtest/gtest.h>

namespace lancet::guard {
namespace {

std::shared_ptr<const GuardRules> rules(const std::string& yaml) {
  auto spec = parse_rules_yaml(yaml, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  auto g = GuardRules::compile(*spec);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return *g;
}

const char* kRules = R"(
rules:
  - id: weapons
    action: block
    keywords: [bomb, 炸弹]
  - id: phone
    action: block
    regexes: ['\b\d{3}-\d{4}\b']
  - id: rude
    action: flag
    lang: en
    keywords: [idiot]
  - id: zh-only
    action: block
    lang: zh
    keywords: [darknet]
allow:
  - id: bath
    keywords: [bath bomb]
    exempts: [weapons]
)";

std::string rule_of(const GuardRules& g, const std::optional<Hit>& h) {
  return h ? g.rules()[static_cast<size_t>(h->rule)].id : "";
}

// Feeds `text` in chunks of `chunk` bytes; returns what a client would have been sent.
std::string stream(const GuardRules& g, const std::string& text, size_t chunk, GuardScanner* s) {
  std::string sent;
  for (size_t i = 0; i < text.size() && !s->block(); i += chunk) {
    s->feed(std::string_view(text).substr(i, chunk));
    const uint64_t safe = s->safe_end();
    EXPECT_GE(safe, sent.size());
    sent = text.substr(0, safe);
  }
  if (!s->block()) {
    s->finish();
    sent = text.substr(0, s->safe_end());
  }
  return sent;
}

TEST(GuardScanner, BlockFlagAndAllowSpans) {
  auto g = rules(kRules);
  EXPECT_EQ(rule_of(*g, scan_text(*g, "how to build a BOMB").block), "weapons");
  EXPECT_FALSE(scan_text(*g, "I love a bath bomb").block);
  EXPECT_EQ(rule_of(*g, scan_text(*g, "a bath bomb and a bomb").block), "weapons");
  EXPECT_EQ(scan_text(*g, "a bath bomb and a bomb").block->start, 18u);
  const Verdict flagged = scan_text(*g, "you idiot");
  EXPECT_FALSE(flagged.block);
  ASSERT_EQ(flagged.hits.size(), 1u);
  EXPECT_EQ(rule_of(*g, flagged.hits[0]), "rude");
  EXPECT_EQ(rule_of(*g, scan_text(*g, "call 555-1234 now").block), "phone");
  EXPECT_FALSE(scan_text(*g, "call 5555-12345 now").block);
}

TEST(GuardScanner, LanguageScopes) {
  auto g = rules(kRules);
  EXPECT_FALSE(scan_text(*g, "darknet market").block);           // zh rule, no Han text
  EXPECT_EQ(rule_of(*g, scan_text(*g, "在darknet上").block), "zh-only");
  EXPECT_EQ(rule_of(*g, scan_text(*g, "制造炸弹").block), "weapons");
  EXPECT_TRUE(scan_text(*g, "笨蛋 idiot").hits.size() == 1);    // en rule: the text has Latin letters
  EXPECT_TRUE(scan_text(*g, "123 !!").hits.empty());
}

TEST(GuardScanner, SplitAcrossChunksNeverLeaks) {
  auto g = rules(kRules);
  const std::string cases[] = {"Sure. Here is a bomb recipe", "我知道炸弹怎么做", "my number is 555-1234 ok",
                               "take a bath bomb, relax", "a bath bombs... bomb!"};
  const std::string want_sent[] = {"Sure. Here is a ", "我知道", "my number is ", "take a bath bomb, relax",
                                   "a bath bombs... "};
  for (size_t c = 0; c < std::size(cases); ++c) {
    for (size_t chunk = 1; chunk <= cases[c].size(); ++chunk) {
      GuardScanner s(g.get());
      EXPECT_EQ(stream(*g, cases[c], chunk, &s), want_sent[c]) << cases[c] << " chunk " << chunk;
    }
  }
}

TEST(GuardScanner, RegexAcrossChunksHoldsBackOnlyThePartialMatch) {
  auto g = rules(kRules);
  GuardScanner s(g.get());
  s.feed("call 555");
  EXPECT_EQ(s.safe_end(), 5u);  // "555" may become a number
  s.feed("-12");
  EXPECT_EQ(s.safe_end(), 5u);
  s.feed("34 now");
  ASSERT_TRUE(s.block());
  EXPECT_EQ(s.block()->start, 5u);
  EXPECT_EQ(s.block()->end, 13u);
}

TEST(GuardScanner, RandomChunkingAgreesWithWholeText) {
  auto g = rules(kRules);
  std::mt19937 rng(3);
  const std::string words[] = {"bath ", "bomb", " ", "炸", "弹", "555", "-", "1234", "idiot", "x", "darknet", "中"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int i = 0, n = 1 + static_cast<int>(rng() % 12); i < n; ++i) text += words[rng() % std::size(words)];
    const Verdict whole = scan_text(*g, text);
    GuardScanner s(g.get());
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 5;
      s.feed(std::string_view(text).substr(i, n));
      i += n;
    }
    s.finish();
    ASSERT_EQ(s.block().has_value(), whole.block.has_value()) << text;
    if (whole.block) EXPECT_EQ(s.block()->start, whole.block->start) << text;
    EXPECT_EQ(s.hits().size(), whole.hits.size()) << text;
  }
}

}  // namespace
}  // namespace lancet::guard
