// A compiled content-rule set (`--guard-rules FILE`, docs/GUARD.md): rules with an id, an
// action (block or flag), a language scope and keywords/regexes, plus allow entries whose
// matches exempt the text they cover from the rules they name. Every keyword of every rule
// and allow entry goes into one KeywordAutomaton; regexes are compiled PCRE2 patterns. Built
// once at start and shared read-only by all requests; GuardScanner does the scanning.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "guard/keyword_automaton.h"
#include "guard/regex_literals.h"
#include "guard/regex_matcher.h"

namespace lancet::guard {

enum class Action { kBlock, kFlag };
// kEn: the rule applies once the text contains an ASCII letter; kZh: once it contains a Han
// character (U+3400-U+9FFF, U+F900-U+FAFF, U+20000-U+2FFFF); kAny: always.
enum class Lang { kAny, kEn, kZh };

const char* action_name(Action a);

// What the rules file says, before compilation (line numbers for error messages).
struct RuleSpec {
  std::string id;
  Action action = Action::kBlock;
  Lang lang = Lang::kAny;
  bool case_sensitive = false;  // regexes; keywords always fold ASCII case
  std::vector<std::string> keywords;
  std::vector<std::string> regexes;
  int line = 0;  // 1-based, in the rules file
};
struct AllowSpec {
  std::string id;
  bool case_sensitive = false;
  std::vector<std::string> keywords;
  std::vector<std::string> regexes;
  std::vector<std::string> exempts;  // rule ids; empty = every rule
  int line = 0;
};
struct RulesSpec {
  std::string source = "<rules>";  // file name, for messages
  int32_t regex_window = 256;      // bytes: longest regex match guaranteed across chunks
  std::vector<RuleSpec> rules;
  std::vector<AllowSpec> allows;
};

class GuardRules {
 public:
  struct Rule {
    std::string id;
    Action action;
    Lang lang;
  };
  // A pattern's owner: a rule (allow = false) or an allow entry.
  struct Owner {
    int32_t index;
    bool allow;
  };

  // Validates and compiles; errors read "FILE:LINE: rule 'ID': what is wrong".
  static StatusOr<std::shared_ptr<const GuardRules>> compile(const RulesSpec& spec);

  const std::vector<Rule>& rules() const { return rules_; }
  const KeywordAutomaton& keywords() const { return automaton_; }
  const Owner& keyword_owner(int32_t pattern) const { return keyword_owner_[static_cast<size_t>(pattern)]; }
  size_t num_regexes() const { return regexes_.size(); }
  const RegexMatcher& regex(size_t i) const { return *regexes_[i]; }
  const Owner& regex_owner(size_t i) const { return regex_owner_[i]; }
  // Does allow entry `allow` exempt rule `rule`?
  bool exempts(int32_t allow, int32_t rule) const;
  // What each regex's text says about where it can match (regex_literals.h). A usable one is
  // searched only from positions where it could start, and in text that is final only while
  // one of its required literals occurs at or after the search start.
  const RegexLiterals& regex_literals(size_t i) const { return literals_[i]; }
  // The required literals of all usable regexes in one automaton; pattern p belongs to regex
  // literal_regex(p).
  const KeywordAutomaton& literal_automaton() const { return literal_automaton_; }
  int32_t literal_regex(int32_t pattern) const { return literal_regex_[static_cast<size_t>(pattern)]; }
  // The regexes with usable literals; those without, searched together through
  // combined_regex(); and those without that are searched on their own, ascending.
  const std::vector<int32_t>& filtered_regexes() const { return filtered_; }
  const std::vector<int32_t>& combined_regexes() const { return combined_members_; }
  const std::vector<int32_t>& lone_regexes() const { return lone_; }
  // Filtered regexes that can start at the same places (same first bytes and prefixes), so a
  // scanner tests a position once per group; groups_at(b): the groups that can start at byte b.
  struct StartGroup {
    std::vector<int32_t> regexes;
    const RegexLiterals* literals;  // of regexes[0], the same for all
  };
  const StartGroup& start_group(int32_t g) const { return start_groups_[static_cast<size_t>(g)]; }
  const std::vector<int32_t>& groups_at(uint8_t byte) const { return groups_at_[byte]; }
  // Regexes without usable literals in one alternation (null when fewer than two qualify): one
  // search tells that none of them can match, the common case, instead of one search per regex.
  // A regex whose meaning or reported start would change inside an alternation (back
  // references, group-number references, recursion, \K, \G, verbs) stays out of it.
  const RegexMatcher* combined_regex() const { return combined_.get(); }
  int32_t regex_window() const { return regex_window_; }
  // Bytes a streaming caller may have to hold back at most (longest keyword, regex window).
  int32_t max_holdback() const;

 private:
  std::vector<Rule> rules_;
  std::vector<std::vector<bool>> allow_exempts_;  // [allow][rule]
  std::vector<std::string> regex_sources_;  // inline-flagged, for the combined pattern
  std::vector<RegexLiterals> literals_;     // [num_regexes]
  KeywordAutomaton literal_automaton_;
  std::vector<int32_t> literal_regex_;      // [literal patterns] -> regex
  std::vector<int32_t> filtered_, combined_members_, lone_;
  std::vector<StartGroup> start_groups_;
  std::array<std::vector<int32_t>, 256> groups_at_;
  KeywordAutomaton automaton_;
  std::vector<Owner> keyword_owner_;
  std::vector<std::unique_ptr<RegexMatcher>> regexes_;
  std::vector<Owner> regex_owner_;
  std::unique_ptr<RegexMatcher> combined_;
  int32_t regex_window_ = 256;
};

// Reads and compiles a YAML rules file (format in docs/GUARD.md). Errors name the file, the
// line and the rule.
StatusOr<std::shared_ptr<const GuardRules>> load_guard_rules(const std::string& path);
// The same from YAML text; `source` names it in messages.
StatusOr<RulesSpec> parse_rules_yaml(const std::string& text, const std::string& source);

}  // namespace lancet::guard
