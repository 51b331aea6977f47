// The rules file: a bad file is an error naming the file, the line and the rule.
#include <gtest/gtest.h>

#include "guard/guard_rules.h"

namespace lancet::guard {
namespace {

std::string error_of(const std::string& yaml) {
  auto spec = parse_rules_yaml(yaml, "rules.yaml");
  if (!spec.ok()) return spec.status().message();
  auto g = GuardRules::compile(*spec);
  return g.ok() ? "" : g.status().message();
}

TEST(RulesFile, GoodFileCompiles) {
  EXPECT_EQ(error_of("rules:\n  - id: a\n    keywords: x\n  - id: b\n    action: flag\n    regexes: ['y+']\n"), "");
}

TEST(RulesFile, BadFilesNameFileLineAndRule) {
  EXPECT_EQ(error_of("rules:\n  - id: a\n    keywords: [x]\n  - id: b\n    regexes: ['(unclosed']\n"),
            "rules.yaml:4: rule 'b': bad regex '(unclosed' at offset 9: missing closing parenthesis");
  EXPECT_EQ(error_of("rules:\n  - id: a\n    action: deny\n    keywords: [x]\n"),
            "rules.yaml:3: rule 'a': action must be 'block' or 'flag'");
  EXPECT_EQ(error_of("rules:\n  - id: a\n    keywords: [x]\n  - id: a\n    keywords: [y]\n"),
            "rules.yaml:4: rule 'a': the id is used twice");
  EXPECT_EQ(error_of("rules:\n  - id: a\n    keywords: ['']\n"), "rules.yaml:2: rule 'a': has an empty keyword");
  EXPECT_EQ(error_of("rules:\n  - id: a\n    regexes: ['x*']\n"),
            "rules.yaml:2: rule 'a': regex 'x*' matches the empty string");
  EXPECT_EQ(error_of("rules:\n  - id: a\n    keyword: [x]\n"), "rules.yaml:3: rule 'a': unknown key 'keyword'");
  EXPECT_EQ(error_of("rules:\n  - id: a\n    keywords: [x]\nallow:\n  - id: ok\n    keywords: [y]\n    exempts: [zz]\n"),
            "rules.yaml:5: allow 'ok': exempts unknown rule 'zz'");
  EXPECT_EQ(error_of("rules:\n  - id: a\n    lang: fr\n    keywords: [x]\n"),
            "rules.yaml:3: rule 'a': lang must be 'any', 'en' or 'zh'");
  EXPECT_EQ(error_of("rules: [\n"), error_of("rules: [\n"));  // stable
  EXPECT_NE(error_of("rules: [\n").find("rules.yaml:"), std::string::npos);
  EXPECT_EQ(error_of("rules: []\n"), "rules.yaml: the file defines no rules");
}

TEST(RulesFile, MissingFileIsAnError) {
  auto g = load_guard_rules("/nonexistent/rules.yaml");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("/nonexistent/rules.yaml"), std::string::npos);
}

}  // namespace
}  // namespace lancet::guard
