// The YAML rules file -> RulesSpec (yaml-cpp), with the line of every rule for messages, and
// load_guard_rules() = read + parse + compile.
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "guard/guard_rules.h"

namespace lancet::guard {
namespace {

struct Ctx {
  const std::string& source;
  Status error(const YAML::Node& n, const std::string& what) const {
    return InvalidArgument(source + ":" + std::to_string(n.Mark().line + 1) + ": " + what);
  }
};

// A string or a list of strings (keywords: foo / keywords: [foo, bar]).
Status string_list(const Ctx& ctx, const YAML::Node& n, const std::string& where, std::vector<std::string>* out) {
  if (n.IsScalar()) {
    out->push_back(n.Scalar());
    return OkStatus();
  }
  if (!n.IsSequence()) return ctx.error(n, where + " must be a string or a list of strings");
  for (const auto& item : n) {
    if (!item.IsScalar()) return ctx.error(item, where + " must be a list of strings");
    out->push_back(item.Scalar());
  }
  return OkStatus();
}

Status boolean(const Ctx& ctx, const YAML::Node& n, const std::string& where, bool* out) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "false") {
      *out = s == "true";
      return OkStatus();
    }
  }
  return ctx.error(n, where + " must be true or false");
}

Status parse_rule(const Ctx& ctx, const YAML::Node& n, RuleSpec* r) {
  if (!n.IsMap()) return ctx.error(n, "each entry of 'rules' must be a mapping");
  r->line = n.Mark().line + 1;
  if (n["id"] && n["id"].IsScalar()) r->id = n["id"].Scalar();
  const std::string who = "rule '" + r->id + "'";
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (key == "id") {
      if (!v.IsScalar() || v.Scalar().empty()) return ctx.error(v, "a rule's id must be a non-empty string");
    } else if (key == "action") {
      const std::string a = v.IsScalar() ? v.Scalar() : "";
      if (a != "block" && a != "flag") return ctx.error(v, who + ": action must be 'block' or 'flag'");
      r->action = a == "block" ? Action::kBlock : Action::kFlag;
    } else if (key == "lang") {
      const std::string l = v.IsScalar() ? v.Scalar() : "";
      if (l != "any" && l != "en" && l != "zh") return ctx.error(v, who + ": lang must be 'any', 'en' or 'zh'");
      r->lang = l == "en" ? Lang::kEn : l == "zh" ? Lang::kZh : Lang::kAny;
    } else if (key == "keywords") {
      RETURN_IF_ERROR(string_list(ctx, v, who + ": keywords", &r->keywords));
    } else if (key == "regexes") {
      RETURN_IF_ERROR(string_list(ctx, v, who + ": regexes", &r->regexes));
    } else if (key == "case_sensitive") {
      RETURN_IF_ERROR(boolean(ctx, v, who + ": case_sensitive", &r->case_sensitive));
    } else {
      return ctx.error(kv.first, who + ": unknown key '" + key + "'");
    }
  }
  return OkStatus();
}

Status parse_allow(const Ctx& ctx, const YAML::Node& n, AllowSpec* a) {
  if (!n.IsMap()) return ctx.error(n, "each entry of 'allow' must be a mapping");
  a->line = n.Mark().line + 1;
  if (n["id"] && n["id"].IsScalar()) a->id = n["id"].Scalar();
  const std::string who = "allow '" + a->id + "'";
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (key == "id") {
      if (!v.IsScalar()) return ctx.error(v, "an allow entry's id must be a string");
    } else if (key == "keywords") {
      RETURN_IF_ERROR(string_list(ctx, v, who + ": keywords", &a->keywords));
    } else if (key == "regexes") {
      RETURN_IF_ERROR(string_list(ctx, v, who + ": regexes", &a->regexes));
    } else if (key == "exempts") {
      RETURN_IF_ERROR(string_list(ctx, v, who + ": exempts", &a->exempts));
    } else if (key == "case_sensitive") {
      RETURN_IF_ERROR(boolean(ctx, v, who + ": case_sensitive", &a->case_sensitive));
    } else {
      return ctx.error(kv.first, who + ": unknown key '" + key + "'");
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<RulesSpec> parse_rules_yaml(const std::string& text, const std::string& source) {
  RulesSpec spec;
  spec.source = source;
  const Ctx ctx{source};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML: " + e.msg);
  }
  if (!root.IsMap()) return InvalidArgument(source + ": must be a mapping with a 'rules' list");
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.Scalar();
      const YAML::Node& v = kv.second;
      if (key == "rules" || key == "allow") {
        if (!v.IsSequence()) return ctx.error(v, "'" + key + "' must be a list");
        for (const auto& item : v) {
          if (key == "rules") {
            RETURN_IF_ERROR(parse_rule(ctx, item, &spec.rules.emplace_back()));
          } else {
            RETURN_IF_ERROR(parse_allow(ctx, item, &spec.allows.emplace_back()));
          }
        }
      } else if (key == "regex_window") {
        int64_t w = 0;
        if (!v.IsScalar() || !YAML::convert<int64_t>::decode(v, w)) return ctx.error(v, "regex_window must be an integer");
        spec.regex_window = static_cast<int32_t>(std::clamp<int64_t>(w, 0, 1 << 30));
      } else {
        return ctx.error(kv.first, "unknown key '" + key + "' (expected rules, allow, regex_window)");
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  return spec;
}

StatusOr<std::shared_ptr<const GuardRules>> load_guard_rules(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot read guard rules file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(RulesSpec spec, parse_rules_yaml(ss.str(), path));
  return GuardRules::compile(spec);
}

}  // namespace lancet::guard
