// The schema walk: one function per kind of subschema; $refs are compiled once (a node is
// registered before its body, so recursive definitions point back at it).
#include "structured/json_schema_compiler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

namespace lancet::structured {
namespace {

using json = nlohmann::ordered_json;

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title",    "description", "default",  "examples", "$schema",
                                          "$id",      "$comment",    "$defs",    "definitions",
                                          "deprecated", "readOnly",  "writeOnly", "strict", "name"};
  return k;
}

const std::set<std::string>& known_keywords() {
  static const std::set<std::string> k = {
      "type",      "properties", "required",  "additionalProperties", "items",   "minItems",
      "maxItems",  "minLength",  "maxLength", "minimum",              "maximum", "exclusiveMinimum",
      "exclusiveMaximum", "enum", "const",    "anyOf",                "oneOf",   "$ref"};
  return k;
}

int64_t pow10i(int32_t n) {
  int64_t v = 1;
  for (int32_t i = 0; i < n; ++i) v *= 10;
  return v;
}

// A bound in grid units: the smallest grid value >= x (> x when exclusive) for a lower bound,
// the largest <= x (< x) for an upper one. A bound within rounding of a grid value is that value.
int64_t bound_units(double x, int32_t frac_digits, bool lower, bool exclusive) {
  double scaled = x * static_cast<double>(pow10i(frac_digits));
  scaled = std::clamp(scaled, -9e17, 9e17);
  const double r = std::nearbyint(scaled);
  const bool exact = std::fabs(scaled - r) <= 1e-9 * std::max(1.0, std::fabs(scaled));
  if (lower) return exact ? static_cast<int64_t>(r) + (exclusive ? 1 : 0) : static_cast<int64_t>(std::ceil(scaled));
  return exact ? static_cast<int64_t>(r) - (exclusive ? 1 : 0) : static_cast<int64_t>(std::floor(scaled));
}

class Compiler {
 public:
  Compiler(const json& root, const SchemaCompileOptions& opt) : root_(root), opt_(opt), g_(std::make_unique<Grammar>()) {}

  StatusOr<std::unique_ptr<Grammar>> run() {
    auto node = compile(root_, "#", 0);
    if (!node.ok()) return node.status();
    g_->set_root(*node);
    return std::move(g_);
  }

 private:
  Status error(const std::string& where, const std::string& what) {
    return InvalidArgument("schema " + where + ": " + what);
  }

  StatusOr<GrammarNode*> add(NodeKind kind, const std::string& where) {
    if (++num_nodes_ > opt_.max_nodes)
      return error(where, "the schema is too large (more than " + std::to_string(opt_.max_nodes) + " nodes)");
    return g_->add(kind);
  }

  StatusOr<const GrammarNode*> compile(const json& s, const std::string& where, int32_t depth) {
    if (depth > opt_.max_depth) return error(where, "nested deeper than " + std::to_string(opt_.max_depth) + " levels");
    if (s.is_boolean()) {
      if (s.get<bool>()) return g_->any_value();
      return error(where, "the schema 'false' admits no value");
    }
    if (!s.is_object()) return error(where, "a schema must be an object");
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (annotation_keywords().count(it.key()) || known_keywords().count(it.key())) continue;
      return error(where, "unsupported keyword '" + it.key().substr(0, 64) + "'");
    }
    if (s.contains("$ref")) return compile_ref(s, where, depth);
    if (s.contains("const")) return literal({s["const"]}, where);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return error(where, "'enum' must be a non-empty list");
      return literal(std::vector<json>(s["enum"].begin(), s["enum"].end()), where + "/enum");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& alts = s[key];
      if (!alts.is_array() || alts.empty()) return error(where, std::string("'") + key + "' must be a non-empty list");
      if (s.contains("type") || s.contains("properties"))
        return error(where, std::string("'") + key + "' next to 'type' or 'properties' is not supported");
      ASSIGN_OR_RETURN(GrammarNode * n, add(NodeKind::kAnyOf, where));
      for (size_t i = 0; i < alts.size(); ++i) {
        ASSIGN_OR_RETURN(const GrammarNode* a,
                         compile(alts[i], where + "/" + key + "/" + std::to_string(i), depth + 1));
        n->any_of.push_back(a);
      }
      return static_cast<const GrammarNode*>(n);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty()) {
        for (const json& e : t) {
          if (!e.is_string()) return error(where, "'type' must be a name or a list of names");
          types.push_back(e.get<std::string>());
        }
      } else {
        return error(where, "'type' must be a name or a list of names");
      }
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else {
      return g_->any_value();
    }
    if (types.size() == 1) return typed(s, types[0], where, depth);
    ASSIGN_OR_RETURN(GrammarNode * n, add(NodeKind::kAnyOf, where));
    for (const std::string& t : types) {
      ASSIGN_OR_RETURN(const GrammarNode* a, typed(s, t, where, depth));
      n->any_of.push_back(a);
    }
    return static_cast<const GrammarNode*>(n);
  }

  StatusOr<const GrammarNode*> compile_ref(const json& s, const std::string& where, int32_t depth) {
    if (!s["$ref"].is_string()) return error(where, "'$ref' must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (s.size() > 1) {
      for (auto it = s.begin(); it != s.end(); ++it)
        if (it.key() != "$ref" && !annotation_keywords().count(it.key()))
          return error(where, "keywords next to '$ref' are not supported ('" + it.key().substr(0, 64) + "')");
    }
    if (auto it = refs_.find(ref); it != refs_.end()) return static_cast<const GrammarNode*>(it->second);
    const json* target = nullptr;
    if (ref == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (ref.rfind(p, 0) != 0) continue;
        const std::string container = p.substr(2, p.size() - 3);
        const std::string name = ref.substr(p.size());
        if (root_.contains(container) && root_[container].is_object() && root_[container].contains(name))
          target = &root_[container][name];
      }
    }
    if (!target) return error(where, "'$ref' '" + ref.substr(0, 128) + "' is not supported or not found (only #, #/$defs/NAME, #/definitions/NAME)");
    // A placeholder that forwards to the target, registered first so that a recursive
    // reference finds it.
    ASSIGN_OR_RETURN(GrammarNode * fwd, add(NodeKind::kAnyOf, where));
    refs_[ref] = fwd;
    ASSIGN_OR_RETURN(const GrammarNode* body, compile(*target, ref, depth + 1));
    fwd->any_of.push_back(body);
    return static_cast<const GrammarNode*>(fwd);
  }

  StatusOr<const GrammarNode*> literal(const std::vector<json>& values, const std::string& where) {
    if (values.size() > kMaxAlternatives)
      return error(where, "at most " + std::to_string(kMaxAlternatives) + " enum values are supported");
    ASSIGN_OR_RETURN(GrammarNode * n, add(NodeKind::kLiteral, where));
    for (const json& v : values) {
      std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
      if (std::find(n->literals.begin(), n->literals.end(), text) == n->literals.end()) n->literals.push_back(text);
    }
    return static_cast<const GrammarNode*>(n);
  }

  StatusOr<int64_t> nonneg_int(const json& s, const char* key, const std::string& where, int64_t dflt) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return error(where, std::string("'") + key + "' must be a non-negative integer");
    return v.get<int64_t>();
  }

  StatusOr<const GrammarNode*> typed(const json& s, const std::string& type, const std::string& where, int32_t depth) {
    if (type == "object") return object(s, where, depth);
    if (type == "array") {
      ASSIGN_OR_RETURN(GrammarNode * n, add(NodeKind::kArray, where));
      ASSIGN_OR_RETURN(n->min_items, nonneg_int(s, "minItems", where, 0));
      ASSIGN_OR_RETURN(n->max_items, nonneg_int(s, "maxItems", where, -1));
      if (n->max_items >= 0 && n->min_items > n->max_items) return error(where, "'minItems' exceeds 'maxItems'");
      if (s.contains("items")) {
        if (s["items"].is_array()) return error(where, "'items' as a list (tuple validation) is not supported");
        ASSIGN_OR_RETURN(n->items, compile(s["items"], where + "/items", depth + 1));
      } else {
        n->items = g_->any_value();
      }
      return static_cast<const GrammarNode*>(n);
    }
    if (type == "string") {
      ASSIGN_OR_RETURN(GrammarNode * n, add(NodeKind::kString, where));
      ASSIGN_OR_RETURN(int64_t lo, nonneg_int(s, "minLength", where, 0));
      ASSIGN_OR_RETURN(int64_t hi, nonneg_int(s, "maxLength", where, -1));
      if (lo > 1 << 20 || hi > 1 << 20) return error(where, "'minLength'/'maxLength' above 1048576 are not supported");
      if (hi >= 0 && lo > hi) return error(where, "'minLength' exceeds 'maxLength'");
      n->min_length = static_cast<int32_t>(lo);
      n->max_length = static_cast<int32_t>(hi);
      return static_cast<const GrammarNode*>(n);
    }
    if (type == "number" || type == "integer") return number(s, type == "integer", where);
    if (type == "boolean") return literal({json(true), json(false)}, where);
    if (type == "null") return literal({json(nullptr)}, where);
    return error(where, "unsupported type '" + type.substr(0, 64) + "'");
  }

  StatusOr<const GrammarNode*> number(const json& s, bool integer, const std::string& where) {
    ASSIGN_OR_RETURN(GrammarNode * n, add(NodeKind::kNumber, where));
    NumberShape sh = unbounded_number(integer);
    auto num = [&](const char* key, double* out) -> Status {
      if (!s[key].is_number()) return error(where, std::string("'") + key + "' must be a number");
      *out = s[key].get<double>();
      return OkStatus();
    };
    auto flag = [&](const char* key) { return s.contains(key) && s[key].is_boolean() && s[key].get<bool>(); };
    double x = 0;
    if (s.contains("minimum")) {
      RETURN_IF_ERROR(num("minimum", &x));
      sh.lo_units = std::max(sh.lo_units, bound_units(x, sh.frac_digits, true, flag("exclusiveMinimum")));
    }
    if (s.contains("maximum")) {
      RETURN_IF_ERROR(num("maximum", &x));
      sh.hi_units = std::min(sh.hi_units, bound_units(x, sh.frac_digits, false, flag("exclusiveMaximum")));
    }
    if (s.contains("exclusiveMinimum") && !s["exclusiveMinimum"].is_boolean()) {
      RETURN_IF_ERROR(num("exclusiveMinimum", &x));
      sh.lo_units = std::max(sh.lo_units, bound_units(x, sh.frac_digits, true, true));
    }
    if (s.contains("exclusiveMaximum") && !s["exclusiveMaximum"].is_boolean()) {
      RETURN_IF_ERROR(num("exclusiveMaximum", &x));
      sh.hi_units = std::min(sh.hi_units, bound_units(x, sh.frac_digits, false, true));
    }
    if (sh.lo_units > sh.hi_units)
      return error(where, "no " + std::string(integer ? "integer" : "number") +
                              " within the bounds can be generated (at most " + std::to_string(sh.max_int_digits) +
                              " integer digits and " + std::to_string(sh.frac_digits) + " decimals)");
    n->number = sh;
    return static_cast<const GrammarNode*>(n);
  }

  StatusOr<const GrammarNode*> object(const json& s, const std::string& where, int32_t depth) {
    const bool closed = s.contains("additionalProperties") && s["additionalProperties"].is_boolean() &&
                        !s["additionalProperties"].get<bool>();
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean() &&
        !s["additionalProperties"].is_object())
      return error(where, "'additionalProperties' must be a boolean or a schema");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return error(where, "'required' must be a list of names");
      for (const json& r : s["required"]) {
        if (!r.is_string()) return error(where, "'required' must be a list of names");
        required.insert(r.get<std::string>());
      }
    }
    const bool has_props = s.contains("properties");
    if (has_props && !s["properties"].is_object()) return error(where, "'properties' must be an object");
    if (!has_props && !closed && required.empty()) {
      // No listed properties: any object is valid (when additionalProperties is a schema,
      // the generated values would have to follow it).
      if (s.contains("additionalProperties") && s["additionalProperties"].is_object())
        return error(where, "'additionalProperties' as a schema without 'properties' is not supported");
      return g_->any_object();
    }
    ASSIGN_OR_RETURN(GrammarNode * n, add(NodeKind::kObject, where));
    if (has_props) {
      const json& props = s["properties"];
      if (props.size() > kMaxAlternatives)
        return error(where, "at most " + std::to_string(kMaxAlternatives) + " properties per object are supported");
      for (auto it = props.begin(); it != props.end(); ++it) {
        Property p;
        p.key_json = json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
        p.required = required.count(it.key()) > 0;
        ASSIGN_OR_RETURN(p.value, compile(it.value(), where + "/properties/" + it.key().substr(0, 64), depth + 1));
        n->properties.push_back(std::move(p));
      }
    }
    for (const std::string& r : required) {
      bool listed = false;
      for (const Property& p : n->properties) listed |= p.key_json == json(r).dump();
      if (!listed) return error(where, "required property '" + r.substr(0, 64) + "' is not in 'properties'");
    }
    return static_cast<const GrammarNode*>(n);
  }

  const json& root_;
  SchemaCompileOptions opt_;
  std::unique_ptr<Grammar> g_;
  std::map<std::string, GrammarNode*> refs_;
  int32_t num_nodes_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Grammar>> compile_json_schema(const nlohmann::ordered_json& schema, const SchemaCompileOptions& options) {
  return Compiler(schema, options).run();
}

}  // namespace lancet::structured
