// KeywordAutomaton against a naive search on random inputs, ASCII case folding, UTF-8 keywords
// and chunked scanning.
#include "guard/keyword_automaton.h"

#include <algorithm>
#include <random>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

namespace lancet::guard {
namespace {

using Triple = std::tuple<int32_t, uint64_t, uint64_t>;

std::set<Triple> naive(const std::vector<std::string>& kws, const std::string& text) {
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(fold_ascii(static_cast<uint8_t>(c)));
  std::set<Triple> out;
  for (size_t p = 0; p < kws.size(); ++p) {
    std::string k = kws[p];
    for (char& c : k) c = static_cast<char>(fold_ascii(static_cast<uint8_t>(c)));
    for (size_t pos = lower.find(k); pos != std::string::npos; pos = lower.find(k, pos + 1))
      out.insert({static_cast<int32_t>(p), pos, pos + k.size()});
  }
  return out;
}

std::set<Triple> scanned(const KeywordAutomaton& a, const std::string& text, size_t chunk) {
  KeywordAutomaton::State st;
  std::vector<KeywordAutomaton::Match> m;
  for (size_t i = 0; i < text.size(); i += chunk) a.scan(std::string_view(text).substr(i, chunk), &st, &m);
  std::set<Triple> out;
  for (const auto& x : m) out.insert({x.pattern, x.start, x.end});
  EXPECT_EQ(out.size(), m.size()) << "a match was reported twice";
  return out;
}

TEST(KeywordAutomaton, MatchesNaiveSearchOnRandomInputs) {
  std::mt19937 rng(7);
  const std::string alphabet = "abAB c\xe4\xb8\xad";  // small alphabet: many overlaps
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> kws(1 + rng() % 12);
    for (auto& k : kws) {
      k.resize(1 + rng() % 4);
      for (char& c : k) c = alphabet[rng() % alphabet.size()];
    }
    std::string text(rng() % 300, ' ');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    const KeywordAutomaton a(kws);
    const auto want = naive(kws, text);
    for (size_t chunk : {size_t{1}, size_t{3}, size_t{1000}}) ASSERT_EQ(scanned(a, text, chunk), want) << trial;
  }
}

TEST(KeywordAutomaton, FoldsAsciiCaseOnly) {
  const KeywordAutomaton a({"Bomb", "\xc3\xa9t\xc3\xa9"});  // "été": non-ASCII bytes match exactly
  EXPECT_EQ(scanned(a, "a BOMB, a bOmB", 100), (std::set<Triple>{{0, 2, 6}, {0, 10, 14}}));
  EXPECT_TRUE(scanned(a, "\xc3\x89T\xc3\x89", 100).empty());  // "ÉTÉ" is not folded
  EXPECT_EQ(scanned(a, "\xc3\xa9T\xc3\xa9", 100).size(), 1u);
}

TEST(KeywordAutomaton, ChineseKeywordsAcrossChunks) {
  const KeywordAutomaton a({"炸弹", "制造"});
  const std::string text = "如何制造炸弹";
  const std::set<Triple> want{{1, 6, 12}, {0, 12, 18}};
  for (size_t chunk = 1; chunk <= text.size(); ++chunk) EXPECT_EQ(scanned(a, text, chunk), want) << chunk;
}

TEST(KeywordAutomaton, LiveDepthIsTheLongestKeywordPrefix) {
  const KeywordAutomaton a({"secret", "sec"});
  KeywordAutomaton::State st;
  std::vector<KeywordAutomaton::Match> m;
  a.scan("top secr", &st, &m);
  EXPECT_EQ(a.live_depth(st), 4);  // "secr"
  ASSERT_EQ(m.size(), 1u);         // "sec"
  a.scan("et", &st, &m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].start, 4u);
  EXPECT_EQ(m[1].end, 10u);
  EXPECT_EQ(a.max_keyword_bytes(), 6);
}

}  // namespace
}  // namespace lancet::guard
