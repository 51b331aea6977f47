// GuardScanner: block/flag, allow-list spans, language scopes, keywords and regexes split
// across chunks, and that safe_end() never releases a byte of a blocked match.
#include "guard/guard_scanner.h"

#include <algorithm>
#include <random>
#include <tuple>

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


// The regex prefilter (regex_literals.h) against a plain per-regex search: the same matches,
// whole or streamed in any chunking, and the same bytes held back after every chunk.
namespace prefilter {

struct Pattern {
  const char* regex;
  bool case_sensitive;
};
const Pattern kPatterns[] = {
    {"api[_-]?key\\s*[:=]\\s*\\w{3}", false},  // literal split across chunks, caseless k
    {"\\bpass(?:word)?\\s*[:=]\\s*\\S{2}", false},
    {"(?:ka|lo)\\d{2,4}zz", false},             // required literal after a class
    {"\\b\\d{3}-\\d{2}\\b", false},
    {"炸弹\\d+", false},                          // Chinese literal
    {"(?<=pass)word", true},
    {"Key(?=word)", true},
    {"\\d+", false},                             // no literal: first bytes only
    {"[^a-z ]{3}", false},                       // no literal, any first byte
    {"x|ka", true},
    {"\xC3\xA9+t", false},                       // caseless non-ASCII: not a literal
    {"\\QA.B\\E|abc", false},
    {"(?i:pa)ss(?-i)WORD", true},
    {"S[a-c]{2}$", false},
    {"(?x) z z", false},                         // x flag: searched everywhere, in one
    {"(?x) s \\s* a", false},                    // alternation with the next two
    {"\\bq?", false},                             // can match the empty string
    {"ab\\Kcd", false},                          // \K: searched everywhere
    {"(?(?=a)ab|cd)", true},                     // conditional: searched everywhere
};
// With and without a back reference among them.
const Pattern kBackReference = {"(a)\\1", false};
const char* kFragments[] = {"api", "_", "-", "key", "KEY", "\xE2\x84\xAA" "ey", "\xC5\xBF", "pass", "PASS", "word",
                            "WORD", ":", "=", " ", "12", "345", "zz", "ka", "lo", "炸弹", "中", "x", "\n", "abc",
                            "A.B", "\xC3\xA9", "\xC3\x89", "t", "s", "aa", "Sab", "cd"};

using Match = std::tuple<int32_t, uint64_t, uint64_t>;


std::shared_ptr<const GuardRules> pattern_rules(bool back_reference) {
  std::vector<Pattern> patterns(std::begin(kPatterns), std::end(kPatterns));
  if (back_reference) patterns.push_back(kBackReference);
  RulesSpec spec;
  for (size_t i = 0; i < patterns.size(); ++i) {
    RuleSpec r;
    r.id = "p" + std::to_string(i);
    r.action = Action::kFlag;
    r.case_sensitive = patterns[i].case_sensitive;
    r.regexes = {patterns[i].regex};
    spec.rules.push_back(r);
  }
  auto g = GuardRules::compile(spec);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return *g;
}

// Each regex searched on its own from where its last search stopped, over all text so far.
struct Reference {
  const GuardRules& g;
  std::string text;
  std::vector<uint64_t> next = std::vector<uint64_t>(g.num_regexes(), 0);
  std::vector<Match> matches;
  uint64_t safe = 0;

  void feed(std::string_view chunk, bool final) {
    text.append(chunk);
    for (size_t r = 0; r < g.num_regexes(); ++r) {
      size_t from = next[r];
      for (;;) {
        const auto f = g.regex(r).search(text, from, !final);
        if (f.result == RegexMatcher::Result::kNone) {
          next[r] = text.size();
          break;
        }
        if (f.result == RegexMatcher::Result::kPartial) {
          next[r] = f.start;
          break;
        }
        matches.emplace_back(static_cast<int32_t>(r), f.start, f.end);
        from = f.end > f.start ? f.end : f.end + 1;
        next[r] = std::min(from, text.size());
        if (from > text.size()) break;
      }
    }
    safe = std::max(safe, *std::min_element(next.begin(), next.end()));
  }
};

std::vector<Match> sorted(std::vector<Match> m) {
  std::sort(m.begin(), m.end());
  return m;
}

std::vector<Match> hits_of(const std::vector<Hit>& hits) {
  std::vector<Match> m;
  for (const Hit& h : hits) m.emplace_back(h.rule, h.start, h.end);
  return sorted(m);
}

void agrees_with_plain_search(bool back_reference) {
  auto g = pattern_rules(back_reference);
  EXPECT_EQ(g->filtered_regexes().size(), std::size(kPatterns) - 5);
  // The x-flag and empty-matching patterns go into one alternation; \K, the conditional and
  // the back reference are searched on their own.
  EXPECT_NE(g->combined_regex(), nullptr);
  EXPECT_EQ(g->combined_regexes().size(), 3u);
  EXPECT_EQ(g->lone_regexes().size(), back_reference ? 3u : 2u);
  std::mt19937 rng(11);
  size_t total = 0, same_as_whole = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string text;
    for (int i = 0, n = 1 + static_cast<int>(rng() % 14); i < n; ++i) text += kFragments[rng() % std::size(kFragments)];
    Reference whole{*g};
    whole.feed(text, /*final=*/true);
    const std::vector<Match> want = sorted(whole.matches);
    total += want.size();
    ASSERT_EQ(hits_of(scan_text(*g, text).hits), want) << text;

    Reference ref{*g};
    GuardScanner s(g.get());
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::min(text.size() - i, 1 + rng() % 6);
      const std::string_view chunk = std::string_view(text).substr(i, n);
      ref.feed(chunk, false);
      s.feed(chunk);
      ASSERT_EQ(s.safe_end(), ref.safe) << text << " after " << i + n << " bytes";
      i += n;
    }
    s.finish();
    ref.feed("", /*final=*/true);
    // Streamed like the plain search. Both can differ from the whole text: a match through a
    // character split across chunks is lost (a search of the cut text sees invalid UTF-8
    // there), and the empty matches of \bq? fall differently at chunk ends.
    ASSERT_EQ(hits_of(s.hits()), sorted(ref.matches)) << text;
    same_as_whole += sorted(ref.matches) == want;
  }
  EXPECT_GT(same_as_whole, 700u);
  EXPECT_GT(total, 1000u);  // the fragments do make matches
}

TEST(GuardScannerPrefilter, AgreesWithPlainSearchWholeAndStreamed) { agrees_with_plain_search(false); }
TEST(GuardScannerPrefilter, AgreesWithPlainSearchBesideABackReference) { agrees_with_plain_search(true); }

TEST(GuardScannerPrefilter, LiteralAcrossChunksAndCaseFolding) {
  auto g = rules("rules:\n  - id: key\n    regexes: ['api[_-]?key\\s*=\\s*\\w{4}']\n"
                 "  - id: zh\n    regexes: ['炸弹\\d+']\n");
  EXPECT_EQ(scan_text(*g, "my api-\xE2\x84\xAA" "ey=wxyz").block->start, 3u);  // U+212A: caseless k
  struct Case {
    std::string text;
    bool blocked;
    std::vector<size_t> chunks;  // whole characters only for the Chinese text (see above)
  };
  const Case cases[] = {{"my API_KEY = abcd!", true, {1, 2, 3, 4, 5}},
                        {"做炸弹123个", true, {3, 6, 9}},
                        {"no apikey here", false, {1, 2, 3, 4, 5}}};
  for (const Case& c : cases) {
    EXPECT_EQ(scan_text(*g, c.text).block.has_value(), c.blocked) << c.text;
    for (size_t chunk : c.chunks) {
      GuardScanner s(g.get());
      const std::string sent = stream(*g, c.text, chunk, &s);
      EXPECT_EQ(s.block().has_value(), c.blocked) << c.text << " chunk " << chunk;
      if (c.blocked) EXPECT_EQ(sent.size(), scan_text(*g, c.text).block->start) << c.text << " chunk " << chunk;
    }
  }
}

// \K reports a start past where its match began and (?(...)...) may name groups by number: in
// one alternation with other patterns their first match would hide the others' earlier ones.
TEST(GuardScannerPrefilter, PatternsUnfitForAnAlternationAreSearchedAlone) {
  auto g = rules("rules:\n  - id: k\n    action: flag\n    regexes: ['ab\\Kcd']\n"
                 "  - id: c\n    action: flag\n    regexes: ['(?(?=a)ab|cd)']\n"
                 "  - id: x\n    action: flag\n    regexes: ['(?x) y y', '(?x) z z']\n");
  EXPECT_EQ(g->lone_regexes().size(), 2u);
  EXPECT_EQ(g->combined_regexes().size(), 2u);
  EXPECT_EQ(hits_of(scan_text(*g, "xabcd yy").hits), (std::vector<Match>{{0, 3, 5}, {1, 1, 3}, {1, 3, 5}, {2, 6, 8}}));
}

}  // namespace prefilter

}  // namespace
}  // namespace lancet::guard
