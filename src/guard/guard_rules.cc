// GuardRules::compile: id and pattern checks, one automaton over all keywords, PCRE2 regexes.
#include "guard/guard_rules.h"

#include <algorithm>
#include <map>

namespace lancet::guard {
namespace {

Status rule_error(const std::string& source, int line, const std::string& kind, const std::string& id,
                  const std::string& what) {
  return InvalidArgument(source + ":" + std::to_string(line) + ": " + kind + " '" + id + "': " + what);
}

// May `pattern` match differently, or report another start, as one branch of an alternation?
// Group numbers shift there, (?R) means the whole alternation, a verb can end the whole search,
// \K moves the reported start past where the attempt began and \G anchors to the alternation's
// start offset. Read textually and conservatively: a false alarm only costs a search.
bool alternation_unsafe(const std::string& pattern, const RegexMatcher& re) {
  if (re.has_backreferences()) return true;
  for (size_t i = 0; i + 1 < pattern.size(); ++i) {
    const char c = pattern[i], n = pattern[i + 1];
    if (c == '\\') {
      if (n == 'K' || n == 'G' || n == 'g') return true;
      ++i;
    } else if (c == '(' && (n == '*' || n == '?')) {
      const char m = i + 2 < pattern.size() ? pattern[i + 2] : '\0';
      const char after = i + 3 < pattern.size() ? pattern[i + 3] : '\0';
      const bool digit_after = after >= '0' && after <= '9';
      if (n == '*' || m == 'R' || m == '&' || m == '(' || (m >= '0' && m <= '9') ||
          ((m == '+' || m == '-') && digit_after) || (m == 'P' && after == '>'))
        return true;
    }
  }
  return false;
}

}  // namespace

const char* action_name(Action a) { return a == Action::kBlock ? "block" : "flag"; }

bool GuardRules::exempts(int32_t allow, int32_t rule) const {
  return allow_exempts_[static_cast<size_t>(allow)][static_cast<size_t>(rule)];
}

int32_t GuardRules::max_holdback() const {
  return std::max(automaton_.max_keyword_bytes(), regexes_.empty() ? 0 : regex_window_);
}

StatusOr<std::shared_ptr<const GuardRules>> GuardRules::compile(const RulesSpec& spec) {
  auto g = std::shared_ptr<GuardRules>(new GuardRules());
  if (spec.regex_window < 16 || spec.regex_window > 65536)
    return InvalidArgument(spec.source + ": regex_window must be 16..65536 bytes");
  g->regex_window_ = spec.regex_window;
  std::map<std::string, int32_t> ids;
  std::vector<std::string> keywords;
  std::vector<bool> unsafe;  // [regex] alternation_unsafe
  // Shared checks of one entry's patterns; `owner` says where its matches go.
  auto add_patterns = [&](const std::string& kind, const std::string& id, int line, bool case_sensitive,
                          const std::vector<std::string>& kws, const std::vector<std::string>& res,
                          Owner owner) -> Status {
    if (kws.empty() && res.empty()) return rule_error(spec.source, line, kind, id, "has no keywords and no regexes");
    for (const std::string& k : kws) {
      if (k.empty()) return rule_error(spec.source, line, kind, id, "has an empty keyword");
      keywords.push_back(k);
      g->keyword_owner_.push_back(owner);
    }
    for (const std::string& r : res) {
      auto m = RegexMatcher::compile(r, case_sensitive);
      if (!m.ok()) return rule_error(spec.source, line, kind, id, m.status().message());
      // A pattern that matches the empty string would match everywhere.
      if ((*m)->search("", 0, false).result == RegexMatcher::Result::kMatch)
        return rule_error(spec.source, line, kind, id, "regex '" + r + "' matches the empty string");
      g->regex_sources_.push_back(std::string(case_sensitive ? "(?-i:" : "(?i:") + r + ")");
      g->literals_.push_back(analyze_regex(r, case_sensitive));
      unsafe.push_back(alternation_unsafe(r, **m));
      g->regexes_.push_back(std::move(*m));
      g->regex_owner_.push_back(owner);
    }
    return OkStatus();
  };
  for (const RuleSpec& r : spec.rules) {
    if (r.id.empty()) return InvalidArgument(spec.source + ":" + std::to_string(r.line) + ": a rule has no id");
    if (!ids.emplace(r.id, static_cast<int32_t>(g->rules_.size())).second)
      return rule_error(spec.source, r.line, "rule", r.id, "the id is used twice");
    const Owner owner{static_cast<int32_t>(g->rules_.size()), false};
    RETURN_IF_ERROR(add_patterns("rule", r.id, r.line, r.case_sensitive, r.keywords, r.regexes, owner));
    g->rules_.push_back({r.id, r.action, r.lang});
  }
  if (g->rules_.empty()) return InvalidArgument(spec.source + ": the file defines no rules");
  for (size_t a = 0; a < spec.allows.size(); ++a) {
    const AllowSpec& al = spec.allows[a];
    std::string id = al.id;
    if (id.empty()) id.append("#").append(std::to_string(a + 1));
    std::vector<bool> ex(g->rules_.size(), al.exempts.empty());
    for (const std::string& name : al.exempts) {
      auto it = ids.find(name);
      if (it == ids.end()) return rule_error(spec.source, al.line, "allow", id, "exempts unknown rule '" + name + "'");
      ex[static_cast<size_t>(it->second)] = true;
    }
    RETURN_IF_ERROR(add_patterns("allow", id, al.line, al.case_sensitive, al.keywords, al.regexes,
                                 Owner{static_cast<int32_t>(a), true}));
    g->allow_exempts_.push_back(std::move(ex));
  }
  g->automaton_ = KeywordAutomaton(keywords);
  std::vector<std::string> literals;
  for (size_t i = 0; i < g->regexes_.size(); ++i) {
    const RegexLiterals& lit = g->literals_[i];
    if (!lit.usable) {
      (unsafe[i] ? g->lone_ : g->combined_members_).push_back(static_cast<int32_t>(i));
      continue;
    }
    g->filtered_.push_back(static_cast<int32_t>(i));
    auto same = [&](const StartGroup& sg) {
      return sg.literals->first_bytes == lit.first_bytes && sg.literals->prefixes == lit.prefixes;
    };
    auto it = std::find_if(g->start_groups_.begin(), g->start_groups_.end(), same);
    if (it == g->start_groups_.end()) {
      for (int b = 0; b < 256; ++b)
        if (lit.first_bytes[static_cast<size_t>(b)])
          g->groups_at_[static_cast<size_t>(b)].push_back(static_cast<int32_t>(g->start_groups_.size()));
      g->start_groups_.push_back({{}, &lit});
      it = g->start_groups_.end() - 1;
    }
    it->regexes.push_back(static_cast<int32_t>(i));
    if (!lit.required) continue;
    for (const std::string& s : *lit.required) {
      literals.push_back(s);
      g->literal_regex_.push_back(static_cast<int32_t>(i));
    }
  }
  if (!literals.empty()) g->literal_automaton_ = KeywordAutomaton(literals);
  if (g->combined_members_.size() > 1) {
    std::string all;
    for (int32_t i : g->combined_members_)
      all += (all.empty() ? "" : "|") + g->regex_sources_[static_cast<size_t>(i)];
    if (auto c = RegexMatcher::compile(all, true); c.ok()) g->combined_ = std::move(*c);
  }
  if (!g->combined_) {
    g->lone_.insert(g->lone_.end(), g->combined_members_.begin(), g->combined_members_.end());
    g->combined_members_.clear();
    std::sort(g->lone_.begin(), g->lone_.end());
  }
  return std::shared_ptr<const GuardRules>(std::move(g));
}

}  // namespace lancet::guard
