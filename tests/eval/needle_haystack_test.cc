// Needle cases (eval/needle_haystack.h): list parsing, passphrases, the haystack fitted under
// a token budget with the needle at the asked depth, and answer scoring.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <set>

#include "eval/needle_haystack.h"

namespace lancet {
namespace {

TEST(NeedleHaystack, ParsesLengthsAndDepths) {
  auto l = parse_needle_lengths("8k, 32k,128k,1000");
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(*l, (std::vector<int64_t>{8192, 32768, 131072, 1000}));
  for (const char* bad : {"", "0", "-1k", "8q", "k", "1.5k"})
    EXPECT_FALSE(parse_needle_lengths(bad).ok()) << bad;
  auto d = parse_needle_depths("0,0.25,0.5,0.75,1");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  for (const char* bad : {"", "1.5", "-0.1", "half"}) EXPECT_FALSE(parse_needle_depths(bad).ok()) << bad;
}

TEST(NeedleHaystack, PassphrasesAreReproducibleAndVary) {
  const std::regex shape("[a-z]+-[0-9]{4}");
  EXPECT_EQ(needle_passphrase(3, 7), needle_passphrase(3, 7));
  std::set<std::string> seen;
  for (int i = 0; i < 20; ++i) {
    const std::string p = needle_passphrase(0, i);
    EXPECT_TRUE(std::regex_match(p, shape)) << p;
    seen.insert(p);
  }
  EXPECT_GE(seen.size(), 18u);
  EXPECT_NE(needle_passphrase(0, 1), needle_passphrase(1, 1));
  EXPECT_EQ(needle_sentence("amber-1234"), "The secret passphrase is amber-1234.");
}

TEST(NeedleHaystack, FillerHasNoDigitsOrPassphrases) {
  const auto& f = needle_filler_sentences();
  ASSERT_GE(f.size(), 30u);
  for (const std::string& s : f) {
    EXPECT_EQ(s.find_first_of("0123456789"), std::string::npos) << s;
    EXPECT_EQ(s.find("passphrase"), std::string::npos) << s;
  }
}

// Stand-in tokenizer: one token per space-separated word, plus a fixed template overhead.
int64_t words(const std::string& s) {
  int64_t n = 0;
  bool in = false;
  for (char c : s) {
    const bool sp = c == ' ' || c == '\n';
    if (!sp && !in) ++n;
    in = !sp;
  }
  return n + 12;
}

TEST(NeedleHaystack, FillsTheBudgetWithTheNeedleAtItsDepth) {
  const std::string needle = needle_sentence("cobalt-4242");
  for (int64_t budget : {200, 1000, 5000}) {
    for (double depth : {0.0, 0.5, 1.0}) {
      HaystackSpec spec{budget, depth, "cobalt-4242"};
      auto h = build_haystack(spec, [](const std::string& s) -> StatusOr<int64_t> { return words(s); });
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      EXPECT_EQ(h->prompt_tokens, words(h->user_content));
      EXPECT_LE(h->prompt_tokens, budget);
      // Within one sentence (at most ~25 words) of the budget.
      EXPECT_GT(h->prompt_tokens, budget - 30) << budget;
      const size_t at = h->user_content.find(needle);
      ASSERT_NE(at, std::string::npos);
      EXPECT_EQ(h->user_content.find(needle, at + 1), std::string::npos);  // exactly once
      EXPECT_EQ(h->needle_sentence_index, std::llround(depth * static_cast<double>(h->filler_sentences)));
      const double rel = static_cast<double>(at) / static_cast<double>(h->user_content.size());
      EXPECT_NEAR(rel, depth, budget >= 1000 ? 0.05 : 0.2) << "budget " << budget << " depth " << depth;
      EXPECT_NE(h->user_content.find(needle_question()), std::string::npos);
      EXPECT_EQ(h->user_content.substr(h->user_content.size() - needle_question().size()), needle_question());
    }
  }
  HaystackSpec tiny{20, 0.5, "cobalt-4242"};
  auto h = build_haystack(tiny, [](const std::string& s) -> StatusOr<int64_t> { return words(s); });
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("instructions and question alone"), std::string::npos);
}

TEST(NeedleHaystack, ScoresExactAndContainedAnswers) {
  const std::string p = "amber-4821";
  auto s = score_needle_answer("amber-4821", p);
  EXPECT_TRUE(s.exact && s.found);
  s = score_needle_answer("  \"Amber-4821.\"\n", p);
  EXPECT_TRUE(s.exact && s.found);
  s = score_needle_answer("The secret passphrase is amber-4821.", p);
  EXPECT_FALSE(s.exact);
  EXPECT_TRUE(s.found);
  s = score_needle_answer("amber-4812", p);
  EXPECT_FALSE(s.exact || s.found);
  s = score_needle_answer("", p);
  EXPECT_FALSE(s.exact || s.found);
}

}  // namespace
}  // namespace lancet
