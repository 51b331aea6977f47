// GBNF grammars (structured/gbnf_grammar.h) through the matcher: what they accept, against
// std::regex on grammars that are regular and against direct counting on recursive ones; the
// states that may end; and the grammars refused, with the reason.
#include "structured/gbnf_grammar.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "structured/matcher.h"

namespace lancet::structured {
namespace {

std::unique_ptr<Grammar> gbnf(std::string_view text) {
  auto g = gbnf_grammar(text);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(g).value() : nullptr;
}

struct Fed {
  bool viable = false, complete = false, done = false;
};
Fed feed(const Grammar& g, std::string_view text) {
  Matcher m(&g);
  for (char c : text)
    if (!m.feed(static_cast<uint8_t>(c))) return {};
  return {true, m.complete(), m.done()};
}
bool accepts(const Grammar& g, std::string_view text) {
  const Fed f = feed(g, text);
  return f.viable && f.complete;
}
bool viable(const Grammar& g, std::string_view text) { return feed(g, text).viable; }

std::string refused(std::string_view text) {
  auto g = gbnf_grammar(text);
  return g.ok() ? std::string("(accepted)") : g.status().message();
}

TEST(GbnfGrammar, AlternativesSequencesAndRepetitions) {
  auto g = gbnf(R"g(root ::= answer ("," " "? answer)*
answer ::= "yes" | "no" | [0-9]+ ("." [0-9]{1,3})?)g");
  ASSERT_TRUE(g);
  for (const char* ok : {"yes", "no", "7", "42.5", "3.141", "yes,no", "yes, 12, no", "0.001,1"}) EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"", "maybe", "4.", "3.1415", "yes,", "yes,  no", ",yes", "yesno"})
    EXPECT_FALSE(accepts(*g, bad)) << bad;
  EXPECT_FALSE(viable(*g, "x"));
  EXPECT_FALSE(viable(*g, "3.1415"));
  EXPECT_TRUE(viable(*g, "yes, "));
  // "no" may be followed by more answers; "3.141" by a comma only; neither is done.
  EXPECT_TRUE(feed(*g, "no").complete);
  EXPECT_FALSE(feed(*g, "no").done);
}

TEST(GbnfGrammar, DoneWhenNothingCanFollow) {
  auto g = gbnf(R"g(root ::= ("a" | "b") "!"{1,2})g");
  ASSERT_TRUE(g);
  EXPECT_FALSE(feed(*g, "a").complete);
  const Fed one = feed(*g, "a!");
  EXPECT_TRUE(one.complete);
  EXPECT_FALSE(one.done);  // a second '!' may come
  const Fed two = feed(*g, "b!!");
  EXPECT_TRUE(two.complete);
  EXPECT_TRUE(two.done);
  EXPECT_FALSE(viable(*g, "b!!!"));
}

TEST(GbnfGrammar, RecursiveRulesMatchBalancedNesting) {
  // Balanced brackets, checked against a counter over every string of up to 10 brackets.
  auto g = gbnf(R"g(
    root  ::= group*      # zero or more groups
    group ::= "(" root ")" | "[" root "]"
  )g");
  ASSERT_TRUE(g);
  const std::string alphabet = "()[]";
  int checked = 0;
  for (int len = 0; len <= 8; ++len) {
    std::vector<int> idx(static_cast<size_t>(len), 0);
    for (;;) {
      std::string s;
      for (int i : idx) s.push_back(alphabet[static_cast<size_t>(i)]);
      std::vector<char> stack;
      bool ok = true, prefix_ok = true;
      for (char c : s) {
        if (c == '(' || c == '[') {
          stack.push_back(c);
        } else if (!stack.empty() && stack.back() == (c == ')' ? '(' : '[')) {
          stack.pop_back();
        } else {
          ok = prefix_ok = false;
          break;
        }
      }
      ok = ok && stack.empty();
      EXPECT_EQ(accepts(*g, s), ok) << s;
      EXPECT_EQ(viable(*g, s), prefix_ok) << s;
      ++checked;
      int k = len - 1;
      while (k >= 0 && ++idx[static_cast<size_t>(k)] == 4) idx[static_cast<size_t>(k--)] = 0;
      if (k < 0) break;
    }
  }
  EXPECT_EQ(checked, 1 + 4 + 16 + 64 + 256 + 1024 + 4096 + 16384 + 65536);
}

// Grammars that are regular, against std::regex (ECMAScript) on random strings over their
// alphabet and on strings drawn from the grammar's own shape.
TEST(GbnfGrammar, AgreesWithStdRegexOnRegularGrammars) {
  struct Case {
    const char* gbnf;
    const char* regex;
    const char* alphabet;
  };
  const Case cases[] = {
      {R"g(root ::= [a-c]+ ("-" [0-9]{2,3})? "!"?)g", "[a-c]+(-[0-9]{2,3})?!?", "abc-019!x"},
      {R"g(root ::= ("ab" | "a") ("b" | "bb")* "c")g", "(ab|a)(b|bb)*c", "abc"},
      {R"g(root ::= x{2} y{,2} x
x ::= [^y-z]
y ::= "y" | "zz")g", "[^y-z]{2}(y|zz){0,2}[^y-z]", "xyz1"},
      {R"g(root ::= "\"" ( [^"\\] | "\\" ["\\/nt] )* "\"")g", R"g("([^"\\]|\\["\\/nt])*")g", "\"\\a/nt"},
      {R"g(root ::= ws "{" ws "}" ws
ws ::= [ \t\n]{0,2})g", "[ \\t\\n]{0,2}\\{[ \\t\\n]{0,2}\\}[ \\t\\n]{0,2}", "{} \t\n"},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    auto g = gbnf(c.gbnf);
    ASSERT_TRUE(g) << c.gbnf;
    const std::regex re(c.regex);
    const std::string alpha = c.alphabet;
    int matches = 0;
    for (int i = 0; i < 20000; ++i) {
      std::string s;
      const int len = static_cast<int>(rng() % 9);
      for (int k = 0; k < len; ++k) s.push_back(alpha[rng() % alpha.size()]);
      const bool want = std::regex_match(s, re);
      matches += want;
      ASSERT_EQ(accepts(*g, s), want) << c.gbnf << " on '" << s << "'";
    }
    EXPECT_GT(matches, 20) << c.gbnf;  // the strings reached both answers
  }
}

TEST(GbnfGrammar, CharacterClassesAreUnicodeCharacters) {
  auto g = gbnf(R"g(root ::= [一-龥]+ "。" | [^\n]{2} | "\u00e9" .)g");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "你好。"));
  EXPECT_TRUE(accepts(*g, "你好"));        // two characters of [^\n] (6 bytes)
  EXPECT_FALSE(accepts(*g, "你好吗"));     // three: neither 2 characters nor ending in "。"
  EXPECT_TRUE(accepts(*g, "ab"));
  EXPECT_TRUE(accepts(*g, "a你"));         // two characters, one of three bytes
  EXPECT_FALSE(accepts(*g, "a\n"));
  EXPECT_TRUE(accepts(*g, "é\n"));         // '.' is any character, newline included
  EXPECT_TRUE(accepts(*g, "éé"));
  EXPECT_FALSE(viable(*g, "\xff"));         // no character starts so
  EXPECT_FALSE(viable(*g, "\xed\xa0"));     // a surrogate
  EXPECT_TRUE(viable(*g, "\xe4\xbd"));      // the first bytes of 你
  // A class of ASCII letters refuses a multi-byte character at its first byte.
  auto ascii = gbnf(R"g(root ::= [a-z]+)g");
  ASSERT_TRUE(ascii);
  EXPECT_FALSE(viable(*ascii, "\xe4"));
  // A negated class that leaves out a whole block refuses its lead byte... when nothing else of
  // that lead byte's range remains.
  auto not_cjk = gbnf(R"g(root ::= [^\u4000-\u4fff])g");
  ASSERT_TRUE(not_cjk);
  EXPECT_FALSE(viable(*not_cjk, "\xe4"));  // U+4000..U+4FFF is all of E4 xx xx
  EXPECT_TRUE(accepts(*not_cjk, "\xe5\x80\x80"));
}

TEST(GbnfGrammar, EscapesCommentsAndLayout) {
  auto g = gbnf("# a comment line\n"
                "root ::=\n"
                "    line+   # trailing comment\n"
                "  | \"\\x41\\u00e9\\t\"\n"
                "line ::= \"\\\"\" [\\-\\]a] \"\\n\"\n");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "\"-\n\"]\n\"a\n"));
  EXPECT_TRUE(accepts(*g, "A\xc3\xa9\t"));
  EXPECT_FALSE(accepts(*g, "\"b\n"));
}

// An ambiguous grammar keeps several parses alive, up to the matcher's bound: a byte that would
// leave more is refused, so a request cannot make each byte cost without limit.
TEST(GbnfGrammar, AmbiguityIsBounded) {
  auto g = gbnf(R"g(root ::= ("a"{0,40}){0,40} "b")g");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "aaab"));
  Matcher m(g.get());
  size_t most = 0;
  int fed = 0;
  for (; fed < 2000; ++fed) {
    if (!m.feed('a')) break;
    most = std::max(most, m.num_stacks());
  }
  EXPECT_GT(most, 8u);     // the parses of a run of a's are many
  EXPECT_LE(most, 256u);   // and bounded
  EXPECT_LT(fed, 1600);    // the grammar allows 1600; the bound cut the run earlier (valid, not every output)
  EXPECT_TRUE(m.feed('b'));
  EXPECT_TRUE(m.complete());
}

TEST(GbnfGrammar, RefusedGrammarsSayWhy) {
  EXPECT_NE(refused("root ::= item\n").find("'item' is used but not defined"), std::string::npos);
  EXPECT_NE(refused("start ::= \"a\"").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(refused("root ::= root \"a\" | \"b\"").find("'root' is left-recursive"), std::string::npos);
  EXPECT_NE(refused("root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"").find("'x' is left-recursive"),
            std::string::npos);
  EXPECT_NE(refused("root ::= (\"a\"?)*").find("can match the empty string"), std::string::npos);
  EXPECT_NE(refused("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(refused("root ::= \"abc").find("closing '\"'"), std::string::npos);
  EXPECT_NE(refused("root ::= [z-a]").find("line 1"), std::string::npos);
  EXPECT_NE(refused("root ::= \"a\"\n  ( \"b\"").find("line 2"), std::string::npos);
  EXPECT_NE(refused("root ::= \"a\"{3,2}").find("m <= n"), std::string::npos);
  EXPECT_NE(refused("root ::= \"\\q\"").find("known escape"), std::string::npos);
  EXPECT_NE(refused("root ::= @").find("expected a literal"), std::string::npos);
  EXPECT_NE(refused("root := \"a\"").find("'::='"), std::string::npos);
  EXPECT_NE(refused("root ::= \"a\"{100000}").find("at most"), std::string::npos);
  // Bounded repetition of what may be empty is fine: the count ends it.
  auto g = gbnf("root ::= (\"a\"?){3} \"b\"");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "b"));
  EXPECT_TRUE(accepts(*g, "aaab"));
  EXPECT_FALSE(accepts(*g, "aaaab"));
}

}  // namespace
}  // namespace lancet::structured
