// analyze_regex: required literals, prefixes and first bytes of typical patterns, patterns it
// must refuse, and the facts about PCRE2's caseless matching that its literals rely on.
#include "guard/regex_literals.h"

#include <gtest/gtest.h>

#include "guard/regex_matcher.h"

namespace lancet::guard {
namespace {

using Strings = std::vector<std::string>;

const char kKelvin[] = "\xE2\x84\xAA";  // U+212A KELVIN SIGN
const char kLongS[] = "\xC5\xBF";       // U+017F LATIN SMALL LETTER LONG S

Strings required(const std::string& pattern, bool case_sensitive = false) {
  const RegexLiterals l = analyze_regex(pattern, case_sensitive);
  EXPECT_TRUE(l.usable) << pattern;
  return l.required ? *l.required : Strings{};
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp < 0x800) return s + static_cast<char>(0xC0 | (cp >> 6)) + static_cast<char>(0x80 | (cp & 0x3F));
  if (cp < 0x10000)
    return s + static_cast<char>(0xE0 | (cp >> 12)) + static_cast<char>(0x80 | ((cp >> 6) & 0x3F)) +
           static_cast<char>(0x80 | (cp & 0x3F));
  return s + static_cast<char>(0xF0 | (cp >> 18)) + static_cast<char>(0x80 | ((cp >> 12) & 0x3F)) +
         static_cast<char>(0x80 | ((cp >> 6) & 0x3F)) + static_cast<char>(0x80 | (cp & 0x3F));
}

TEST(RegexLiterals, RequiredLiterals) {
  EXPECT_EQ(required("(?:ka|lo)\\d{2,4}zz"), (Strings{"zz"}));  // the literal after a class
  EXPECT_EQ(required("\\b\\d{3}-\\d{4}\\b"), (Strings{"-"}));
  EXPECT_EQ(required("bomb|grenade", true), (Strings{"bomb", "grenade"}));
  EXPECT_EQ(required("\\bpipe\\s+bomb\\b", true), (Strings{"pipe"}));
  EXPECT_EQ(required("炸弹\\d+"), (Strings{"炸弹"}));
  EXPECT_EQ(required("x\\Qa.b\\E", true), (Strings{"xa.b"}));
  EXPECT_EQ(required("colou?r", true), (Strings{"color", "colour"}));
  EXPECT_EQ(required("a[bc]d", true), (Strings{"abd", "acd"}));
  EXPECT_EQ(required("(?<=\\$)\\d+usd", true), (Strings{"usd"}));  // not the lookbehind's text
  // Caseless: ASCII letters lowercased; 'k' and 's' also as the characters PCRE2 folds to them.
  EXPECT_EQ(required("Sk"), (Strings{"sk", std::string("s") + kKelvin, std::string(kLongS) + "k",
                                     std::string(kLongS) + kKelvin}));
  EXPECT_EQ(required("SK", true), (Strings{"sk"}));  // compared with ASCII case folded
  EXPECT_EQ(required("(?i)ab(?-i)CD", true), (Strings{"abcd"}));
  EXPECT_TRUE(required("\\w+@\\w+").size() == 1 && required("\\w+@\\w+")[0] == "@");
  EXPECT_TRUE(required("\\d+").empty());  // usable (first bytes), but nothing to require
  // A caseless character of a cased script is not listed: its other cases are not known here.
  EXPECT_EQ(required("été"), (Strings{"t"}));
  EXPECT_EQ(required("été", true), (Strings{"\xC3\xA9t\xC3\xA9"}));
}

TEST(RegexLiterals, PrefixesAndFirstBytes) {
  const RegexLiterals l = analyze_regex("(?:ka|lo)\\d{2,4}zz", false);
  EXPECT_EQ(l.prefixes, (Strings{"ka", "lo", std::string(kKelvin) + "a"}));
  EXPECT_TRUE(l.first_bytes['k'] && l.first_bytes['K'] && l.first_bytes['l'] && l.first_bytes[0xE2]);
  EXPECT_EQ(l.first_bytes.count(), 5u);
  EXPECT_TRUE(l.could_start_at("a ka12", 2));
  EXPECT_TRUE(l.could_start_at("a KA12", 2));
  EXPECT_TRUE(l.could_start_at("a k", 2));   // cut short by the end: may still become "ka"
  EXPECT_FALSE(l.could_start_at("a kb", 2));
  EXPECT_FALSE(l.could_start_at("a ka", 0));
  // \d under UCP: ASCII digits and the lead bytes of other scripts' digits, not of Han.
  const RegexLiterals d = analyze_regex("\\d{3}", false);
  EXPECT_TRUE(d.first_bytes['7']);
  EXPECT_TRUE(d.first_bytes[0xD9]);   // U+0660 ARABIC-INDIC DIGIT ZERO
  EXPECT_TRUE(d.first_bytes[0xEF]);   // U+FF10 FULLWIDTH DIGIT ZERO
  EXPECT_FALSE(d.first_bytes[0xE4]);  // U+4E00.. (CJK)
  EXPECT_FALSE(d.first_bytes['a']);
  EXPECT_TRUE(d.prefixes.empty());
  // A lookahead may read past a partial match's end: any byte may begin one.
  EXPECT_EQ(analyze_regex("(?=ab)abc", true).first_bytes.count(), 256u);
}

TEST(RegexLiterals, RefusesWhatItCannotRead) {
  for (const char* p : {"(a)\\1x", "(?x) a b c", "\\Gabc", "ab\\Kcd", "(?(1)a|b)", "(*UTF)abc", "(?R)",
                        "a{,3}b", "a\\cXb", "(?|(a)|(b))", "x*", "a?|b", "(?=x)", "\\bx?"}) {
    EXPECT_FALSE(analyze_regex(p, false).usable) << p;
    EXPECT_EQ(analyze_regex(p, false).first_bytes.count(), 256u) << p;
  }
  EXPECT_TRUE(analyze_regex("a{2,3}b", false).usable);
  EXPECT_TRUE(analyze_regex("(?<name>ab)(?#note)c", false).usable);
}

// The Kelvin sign and the long s are the only non-ASCII characters PCRE2's caseless matching
// equates with ASCII letters.
TEST(RegexLiterals, OnlyKelvinAndLongSFoldToAsciiLetters) {
  auto re = RegexMatcher::compile("[a-z]", false);
  ASSERT_TRUE(re.ok());
  std::string others;
  for (uint32_t cp = 0x80; cp <= 0x10FFFF; ++cp)
    if ((cp < 0xD800 || cp > 0xDFFF) && cp != 0x212A && cp != 0x17F) others += utf8(cp);
  EXPECT_EQ((*re)->search(others, 0, false).result, RegexMatcher::Result::kNone);
  EXPECT_EQ((*re)->search(kKelvin, 0, false).result, RegexMatcher::Result::kMatch);
  EXPECT_EQ((*re)->search(kLongS, 0, false).result, RegexMatcher::Result::kMatch);
}

// Characters treated as caseless (literals from caseless patterns) have no case in Unicode.
TEST(RegexLiterals, CaselessRangesHaveNoCasedLetters) {
  auto cased = RegexMatcher::compile("[\\p{Lu}\\p{Ll}\\p{Lt}]", true);
  ASSERT_TRUE(cased.ok());
  const std::pair<uint32_t, uint32_t> ranges[] = {
      {0x2000, 0x206F}, {0x3000, 0x9FFF}, {0xAC00, 0xD7A3}, {0xF900, 0xFAFF}, {0x20000, 0x2FFFF}};
  for (const auto& [lo, hi] : ranges) {
    std::string text;
    for (uint32_t cp = lo; cp <= hi; ++cp) text += utf8(cp);
    EXPECT_EQ((*cased)->search(text, 0, false).result, RegexMatcher::Result::kNone) << std::hex << lo;
    EXPECT_EQ(required(utf8(lo + 1) + "x").front(), utf8(lo + 1) + "x") << std::hex << lo;
  }
}

}  // namespace
}  // namespace lancet::guard
