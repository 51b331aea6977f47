// The regex subset: what matches, what is refused as a prefix, UTF-8 atoms and classes, and
// the unsupported syntax named in the error.
#include "structured/regex_dfa.h"

#include <gtest/gtest.h>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace lancet::structured {
namespace {

struct Result {
  bool viable, complete, done;
};
Result run(const char* pattern, std::string_view text) {
  auto g = regex_grammar(pattern);
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status().to_string();
  if (!g.ok()) return {false, false, false};
  Matcher m(g->get());
  for (char c : text)
    if (!m.feed(static_cast<uint8_t>(c))) return {false, false, false};
  return {true, m.complete(), m.done()};
}
bool full(const char* p, std::string_view t) { return run(p, t).complete; }
bool viable(const char* p, std::string_view t) { return run(p, t).viable; }

TEST(RegexDfa, MatchesWholeOutputs) {
  EXPECT_TRUE(full("[0-9]{3}-[a-z]{2,4}", "123-ab"));
  EXPECT_TRUE(full("[0-9]{3}-[a-z]{2,4}", "123-abcd"));
  EXPECT_FALSE(viable("[0-9]{3}-[a-z]{2,4}", "123-abcde"));
  EXPECT_FALSE(viable("[0-9]{3}-[a-z]{2,4}", "12-"));
  EXPECT_FALSE(full("[0-9]{3}-[a-z]{2,4}", "123-a"));
  EXPECT_TRUE(run("[0-9]{3}-[a-z]{2,4}", "123-abcd").done);
  EXPECT_FALSE(run("[0-9]{3}-[a-z]{2,4}", "123-abc").done);
  EXPECT_TRUE(full("^(yes|no)$", "yes"));
  EXPECT_FALSE(viable("(yes|no)", "ye!"));
  EXPECT_TRUE(full("a+b*c?", "aaabb"));
  EXPECT_TRUE(full("(?:ab)*", ""));
  EXPECT_TRUE(full("\\d+\\.\\d{2}", "12.50"));
  EXPECT_FALSE(viable("\\d+\\.\\d{2}", "12a"));
  EXPECT_TRUE(full("\\w+@\\w+\\.com", "me@host.com"));
  EXPECT_TRUE(full("[A-Z][a-z]*( [A-Z][a-z]*){0,2}", "Ada Love Lace"));
  EXPECT_FALSE(viable("[A-Z][a-z]*( [A-Z][a-z]*){0,2}", "Ada Love Lace X"));
}

TEST(RegexDfa, Utf8AtomsAndClasses) {
  EXPECT_TRUE(full("caf\xc3\xa9+", "caf\xc3\xa9\xc3\xa9"));   // the quantifier repeats the whole é
  EXPECT_TRUE(full(".{2}", "\xc3\xa9x"));                       // two characters, one of them two bytes
  EXPECT_FALSE(viable(".", "\xff"));                             // never invalid UTF-8
  EXPECT_FALSE(viable(".", "\n"));
  EXPECT_TRUE(full("[^a-c]+", "xyz\xe2\x82\xac"));
  EXPECT_FALSE(viable("[^a-c]+", "xa"));
  EXPECT_TRUE(full("[-a]+", "a-a"));
  EXPECT_TRUE(full("[\\]x]", "]"));
}

TEST(RegexDfa, UnsupportedSyntaxIsNamed) {
  auto msg = [](const char* p) {
    auto d = compile_regex(p);
    return d.ok() ? std::string() : d.status().message();
  };
  EXPECT_NE(msg("(a)\\1").find("'\\1'"), std::string::npos);
  EXPECT_NE(msg("(?=a)b").find("'(?'"), std::string::npos);
  EXPECT_NE(msg("a{3,2}").find("n < m"), std::string::npos);
  EXPECT_NE(msg("a{1000}").find("above"), std::string::npos);
  EXPECT_NE(msg("(ab").find("')'"), std::string::npos);
  EXPECT_NE(msg("ab)").find("')'"), std::string::npos);
  EXPECT_NE(msg("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(msg("a^b").find("anchor"), std::string::npos);
  EXPECT_NE(msg("[\xc3\xa9]").find("non-ASCII"), std::string::npos);
  EXPECT_NE(msg("(a{200}){200}"), "");  // more automaton states than allowed
}

}  // namespace
}  // namespace lancet::structured
