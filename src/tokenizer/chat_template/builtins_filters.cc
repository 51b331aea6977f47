// Filters and tests (`x | name(...)`, `x is name(...)`) with Jinja 3 semantics, plus
// transformers' tojson (json.dumps with ensure_ascii=False and key order kept).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/template_error.h"
#include "tokenizer/chat_template/text_util.h"

namespace lancet::jinja {

namespace {

using FilterFn = std::function<Value(Interpreter&, const Value&, const CallArgs&)>;
using TestFn = std::function<bool(Interpreter&, const Value&, const CallArgs&)>;

const Value* arg(const CallArgs& a, size_t i, const char* name) { return a.get(i, name); }

bool flag(const CallArgs& a, size_t i, const char* name, bool dflt) {
  const Value* v = a.get(i, name);
  return v ? truthy(*v) : dflt;
}

// "a.b.0" -> obj["a"]["b"][0], as Jinja's make_attrgetter.
Value attr_path(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string str_arg(const CallArgs& a, size_t i, const char* name, const char* filter) {
  const Value* v = a.get(i, name);
  if (!v || !v->is_string()) fail(std::string(filter) + ": argument '" + name + "' must be a string");
  return v->str();
}

// For sort/unique/min/max: strings compare case-insensitively unless asked otherwise.
Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value(py_lower(v.str())) : v;
}

std::string ensure_ascii(const std::string& s) {
  std::string out;
  std::vector<size_t> off = codepoint_offsets(s);
  for (size_t k = 0; k + 1 < off.size(); ++k) {
    std::string_view ch(s.data() + off[k], off[k + 1] - off[k]);
    if (ch.size() == 1) {
      out += ch;
      continue;
    }
    // Decode and write \uXXXX, with a surrogate pair above the BMP.
    auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(ch[i])); };
    uint32_t cp = ch.size() == 2 ? ((b(0) & 0x1f) << 6) | (b(1) & 0x3f)
                  : ch.size() == 3 ? ((b(0) & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f)
                                   : ((b(0) & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
    char buf[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    }
    out += buf;
  }
  return out;
}

Value f_tojson(Interpreter& in, const Value& v, const CallArgs& a) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  JsonFormat fmt;
  if (const Value* ind = arg(a, 1, "indent"); ind && !ind->is_none()) {
    if (!ind->is_int() || ind->integer() < 0 || ind->integer() > 64) fail("tojson: indent must be an integer 0..64");
    fmt.indent = static_cast<int>(ind->integer());
  }
  std::string item_sep, key_sep;
  if (const Value* sep = arg(a, 2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->items().size() != 2 || !sep->items()[0].is_string() || !sep->items()[1].is_string())
      fail("tojson: separators must be a (item_separator, key_separator) pair");
    item_sep = sep->items()[0].str();
    key_sep = sep->items()[1].str();
    fmt.item_sep = &item_sep;
    fmt.key_sep = &key_sep;
  }
  fmt.sort_keys = flag(a, 3, "sort_keys", false);
  std::string out = to_json(v, fmt);
  in.check_size(out.size());
  in.charge(out.size() / 64);
  if (flag(a, 0, "ensure_ascii", false)) out = ensure_ascii(out);
  return Value(std::move(out));
}

Value f_length(Interpreter&, const Value& v, const CallArgs&) {
  switch (v.kind()) {
    case Value::Kind::kString: return Value(static_cast<int64_t>(codepoint_count(v.str())));
    case Value::Kind::kList: return Value(static_cast<int64_t>(v.items().size()));
    case Value::Kind::kDict: return Value(static_cast<int64_t>(v.dict().size()));
    case Value::Kind::kUndefined: return Value(0);
    default: fail(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

Value f_int(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  Value dflt = d ? *d : Value(0);
  if (v.is_int() || v.is_bool()) return Value(v.integer());
  if (v.is_float()) {
    double x = v.number();
    if (!std::isfinite(x) || std::fabs(x) >= 9.2e18) return dflt;
    return Value(static_cast<int64_t>(x));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str(), nullptr, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty()) return dflt;
    char* end = nullptr;
    errno = 0;
    long long n = std::strtoll(s.c_str(), &end, 10);
    if (*end == '\0' && errno == 0) return Value(static_cast<int64_t>(n));
    double x = std::strtod(s.c_str(), &end);
    if (*end == '\0' && std::isfinite(x) && std::fabs(x) < 9.2e18) return Value(static_cast<int64_t>(x));
  }
  return dflt;
}

Value f_float(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  Value dflt = d ? *d : Value(0.0);
  if (v.is_number()) return Value(v.number());
  if (v.is_string()) {
    std::string s = py_strip(v.str(), nullptr, true, true);
    char* end = nullptr;
    double x = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(x);
  }
  return dflt;
}

Value f_first_last(const Value& v, bool first) {
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("");
  return first ? items.front() : items.back();
}

Value f_join(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* sep_v = arg(a, 0, "d");
  std::string sep = sep_v ? to_str(*sep_v) : "";
  const Value* attr = a.kwarg("attribute");
  if (!attr && a.pos.size() > 1) attr = &a.pos[1];
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attr ? attr_path(item, to_str(*attr)) : item);
    in.check_size(out.size());
  }
  in.charge(out.size() / 64 + 1);
  return Value(std::move(out));
}

Value f_items(Interpreter& in, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) fail("items filter requires a mapping, got " + std::string(type_name(v)));
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict().entries()) out.push_back(Value::list({Value(k), val}, true));
  in.charge(out.size());
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr share one shape: an optional attribute, a test name
// (default: truthiness) and the test's arguments.
Value select_impl(Interpreter& in, const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  size_t i = 0;
  std::string attr;
  if (by_attr) attr = str_arg(a, i++, "attribute", "selectattr");
  std::string test;
  CallArgs targs;
  if (i < a.pos.size()) {
    if (!a.pos[i].is_string()) fail("select: test name must be a string");
    test = a.pos[i++].str();
    targs.pos.assign(a.pos.begin() + static_cast<long>(i), a.pos.end());
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    in.charge(1);
    Value subject = by_attr ? attr_path(item, attr) : item;
    bool r = test.empty() ? truthy(subject) : apply_test(in, test, subject, targs);
    if (r == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_map(Interpreter& in, const Value& v, const CallArgs& a) {
  std::vector<Value> out;
  if (const Value* attr = a.kwarg("attribute")) {
    const Value* dflt = a.kwarg("default");
    for (const Value& item : iterate(v)) {
      in.charge(1);
      Value x = attr_path(item, to_str(*attr));
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::list(std::move(out));
  }
  if (a.pos.empty() || !a.pos[0].is_string()) fail("map: needs a filter name or attribute=");
  std::string filter = a.pos[0].str();
  CallArgs fargs;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const Value& item : iterate(v)) {
    in.charge(1);
    out.push_back(apply_filter(in, filter, item, fargs));
  }
  return Value::list(std::move(out));
}

Value f_indent(Interpreter& in, const Value& v, const CallArgs& a) {
  std::string s = to_str(v);
  const Value* w = arg(a, 0, "width");
  std::string ind = !w ? std::string(4, ' ') : w->is_string() ? w->str()
                       : std::string(static_cast<size_t>(std::clamp<int64_t>(w->integer(), 0, 1024)), ' ');
  bool first = flag(a, 1, "first", false);
  bool blank = flag(a, 2, "blank", false);
  s += "\n";  // Jinja appends a newline so splitlines keeps a trailing empty line
  std::vector<std::string> lines = py_splitlines(s);
  in.check_size(s.size() + lines.size() * ind.size());
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += ind;
    }
    out += lines[i];
  }
  if (first) out = ind + out;
  return Value(std::move(out));
}

std::vector<Value> sorted(const Value& v, const CallArgs& a, size_t attr_pos, bool* reverse_out) {
  bool reverse = reverse_out ? flag(a, 0, "reverse", false) : false;
  bool cs = flag(a, reverse_out ? 1 : 0, "case_sensitive", false);
  const Value* attr = a.get(attr_pos, "attribute");
  std::vector<Value> items = iterate(v);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key(attr ? attr_path(x, to_str(*attr)) : x, cs);
    Value ky = sort_key(attr ? attr_path(y, to_str(*attr)) : y, cs);
    return reverse ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
  });
  return items;
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = [] {
    std::map<std::string, FilterFn> t;
    auto str_fn = [](std::string (*fn)(std::string_view)) {
      return [fn](Interpreter&, const Value& v, const CallArgs&) { return Value(fn(to_str(v))); };
    };
    t["tojson"] = f_tojson;
    t["length"] = t["count"] = f_length;
    t["trim"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value* c = arg(a, 0, "chars");
      std::string chars = c && !c->is_none() ? to_str(*c) : "";
      return Value(py_strip(to_str(v), c && !c->is_none() ? &chars : nullptr, true, true));
    };
    t["string"] = [](Interpreter&, const Value& v, const CallArgs&) { return Value(to_str(v)); };
    t["int"] = f_int;
    t["float"] = f_float;
    t["lower"] = str_fn(py_lower);
    t["upper"] = str_fn(py_upper);
    t["title"] = str_fn(jinja_title);
    t["capitalize"] = str_fn(py_capitalize);
    t["first"] = [](Interpreter&, const Value& v, const CallArgs&) { return f_first_last(v, true); };
    t["last"] = [](Interpreter&, const Value& v, const CallArgs&) { return f_first_last(v, false); };
    t["join"] = f_join;
    t["default"] = t["d"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value* d = arg(a, 0, "default_value");
      bool boolean = flag(a, 1, "boolean", false);
      if (v.is_undefined() || (boolean && !truthy(v))) return d ? *d : Value(std::string());
      return v;
    };
    t["list"] = [](Interpreter& in, const Value& v, const CallArgs&) {
      if (v.is_undefined()) return Value::list({});
      std::vector<Value> items = iterate(v);
      in.charge(items.size());
      return Value::list(std::move(items));
    };
    t["items"] = f_items;
    t["dictsort"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      Value pairs = f_items(in, v, {});
      bool cs = flag(a, 0, "case_sensitive", false);
      bool by_value = a.get(1, "by") && to_str(*a.get(1, "by")) == "value";
      bool reverse = flag(a, 2, "reverse", false);
      std::vector<Value> items = pairs.items();
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        Value kx = sort_key(x.items()[by_value ? 1 : 0], cs), ky = sort_key(y.items()[by_value ? 1 : 0], cs);
        return reverse ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
      });
      return Value::list(std::move(items));
    };
    t["selectattr"] = [](Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, true, true); };
    t["rejectattr"] = [](Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, true, false); };
    t["select"] = [](Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, false, true); };
    t["reject"] = [](Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, false, false); };
    t["map"] = f_map;
    t["attr"] = [](Interpreter&, const Value& v, const CallArgs& a) { return get_attr(v, str_arg(a, 0, "name", "attr")); };
    t["replace"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      CallArgs m;
      m.pos = {Value(str_arg(a, 0, "old", "replace")), Value(str_arg(a, 1, "new", "replace"))};
      if (const Value* c = arg(a, 2, "count"); c && !c->is_none()) m.pos.push_back(*c);
      return get_attr(Value(to_str(v)), "replace").fn().call(in, m);
    };
    t["safe"] = [](Interpreter&, const Value& v, const CallArgs&) { return v; };
    t["escape"] = t["e"] = t["forceescape"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return Value(html_escape(to_str(v)));
    };
    t["indent"] = f_indent;
    t["reverse"] = [](Interpreter&, const Value& v, const CallArgs&) {
      std::vector<Value> items = iterate(v);
      std::reverse(items.begin(), items.end());
      if (!v.is_string()) return Value::list(std::move(items));
      std::string s;
      for (const Value& c : items) s += c.str();
      return Value(std::move(s));
    };
    t["sort"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      bool rev = false;
      in.charge(iterate(v).size() * 8);
      return Value::list(sorted(v, a, 2, &rev));
    };
    t["unique"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      bool cs = flag(a, 0, "case_sensitive", false);
      const Value* attr = a.get(1, "attribute");
      std::vector<Value> out, seen;
      for (const Value& item : iterate(v)) {
        Value key = sort_key(attr ? attr_path(item, to_str(*attr)) : item, cs);
        in.charge(seen.size() + 1);
        bool dup = false;
        for (const Value& s : seen) dup = dup || equals(s, key);
        if (!dup) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
    };
    auto minmax = [](bool want_max) {
      return [want_max](Interpreter&, const Value& v, const CallArgs& a) {
        std::vector<Value> items = sorted(v, a, 1, nullptr);
        if (items.empty()) return Value::undefined("");
        return want_max ? items.back() : items.front();
      };
    };
    t["min"] = minmax(false);
    t["max"] = minmax(true);
    t["sum"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      const Value* attr = a.get(0, "attribute");
      const Value* start = a.get(1, "start");
      Value acc = start ? *start : Value(0);
      for (const Value& item : iterate(v)) acc = binary_op(in, "+", acc, attr ? attr_path(item, to_str(*attr)) : item);
      return acc;
    };
    t["abs"] = [](Interpreter&, const Value& v, const CallArgs&) {
      if (v.is_int() || v.is_bool()) {
        if (v.integer() == INT64_MIN) fail("integer overflow");
        return Value(v.integer() < 0 ? -v.integer() : v.integer());
      }
      if (v.is_float()) return Value(std::fabs(v.number()));
      fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
    };
    t["round"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      if (!v.is_number()) fail("round: a number is required");
      const Value* p = arg(a, 0, "precision");
      const Value* m = arg(a, 1, "method");
      int64_t prec = p ? p->integer() : 0;
      std::string method = m ? to_str(*m) : "common";
      double scale = std::pow(10.0, static_cast<double>(prec));
      double x = v.number() * scale;
      if (method == "common") x = std::round(x);
      else if (method == "ceil") x = std::ceil(x);
      else if (method == "floor") x = std::floor(x);
      else fail("round: method must be common, ceil or floor");
      return Value(x / scale);
    };
    t["wordcount"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return Value(static_cast<int64_t>(word_count(to_str(v))));
    };
    t["format"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      return binary_op(in, "%", Value(to_str(v)), Value::list(a.pos, true));
    };
    return t;
  }();
  return table;
}

bool num_test(const Value& v) { return v.is_number(); }

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = [] {
    std::map<std::string, TestFn> t;
    auto kind = [](bool (*pred)(const Value&)) {
      return [pred](Interpreter&, const Value& v, const CallArgs&) { return pred(v); };
    };
    auto need = [](const CallArgs& a, const char* test) -> const Value& {
      if (a.pos.empty()) fail(std::string("test '") + test + "' needs an argument");
      return a.pos[0];
    };
    t["defined"] = kind([](const Value& v) { return !v.is_undefined(); });
    t["undefined"] = kind([](const Value& v) { return v.is_undefined(); });
    t["none"] = kind([](const Value& v) { return v.is_none(); });
    t["boolean"] = kind([](const Value& v) { return v.is_bool(); });
    t["true"] = kind([](const Value& v) { return v.is_bool() && v.boolean(); });
    t["false"] = kind([](const Value& v) { return v.is_bool() && !v.boolean(); });
    t["integer"] = kind([](const Value& v) { return v.is_int(); });
    t["float"] = kind([](const Value& v) { return v.is_float(); });
    t["number"] = kind(num_test);
    t["string"] = kind([](const Value& v) { return v.is_string(); });
    t["mapping"] = kind([](const Value& v) { return v.is_dict(); });
    // Jinja's Undefined is iterable (as empty) and has __len__/__getitem__.
    t["iterable"] = kind([](const Value& v) { return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined(); });
    t["sequence"] = t["iterable"];
    t["callable"] = kind([](const Value& v) { return v.is_callable(); });
    t["lower"] = kind([](const Value& v) { return v.is_string() && py_lower(v.str()) == v.str(); });
    t["upper"] = kind([](const Value& v) { return v.is_string() && py_upper(v.str()) == v.str(); });
    t["escaped"] = kind([](const Value&) { return false; });
    t["odd"] = kind([](const Value& v) {
      if (!v.is_int()) fail("odd: an integer is required");
      return v.integer() % 2 != 0;
    });
    t["even"] = kind([](const Value& v) {
      if (!v.is_int()) fail("even: an integer is required");
      return v.integer() % 2 == 0;
    });
    t["divisibleby"] = [need](Interpreter&, const Value& v, const CallArgs& a) {
      const Value& n = need(a, "divisibleby");
      if (!v.is_int() || !n.is_int() || n.integer() == 0) fail("divisibleby needs non-zero integers");
      return v.integer() % n.integer() == 0;
    };
    auto cmp = [need](const char* name, std::function<bool(int)> ok) {
      return [need, name, ok](Interpreter&, const Value& v, const CallArgs& a) { return ok(compare(v, need(a, name))); };
    };
    t["eq"] = t["equalto"] = t["=="] = [need](Interpreter&, const Value& v, const CallArgs& a) { return equals(v, need(a, "eq")); };
    t["ne"] = t["!="] = [need](Interpreter&, const Value& v, const CallArgs& a) { return !equals(v, need(a, "ne")); };
    t["sameas"] = [need](Interpreter&, const Value& v, const CallArgs& a) {
      const Value& o = need(a, "sameas");
      return v.kind() == o.kind() && equals(v, o);
    };
    t["lt"] = t["lessthan"] = t["<"] = cmp("lt", [](int c) { return c < 0; });
    t["le"] = t["<="] = cmp("le", [](int c) { return c <= 0; });
    t["gt"] = t["greaterthan"] = t[">"] = cmp("gt", [](int c) { return c > 0; });
    t["ge"] = t[">="] = cmp("ge", [](int c) { return c >= 0; });
    t["in"] = [need](Interpreter&, const Value& v, const CallArgs& a) { return contains(need(a, "in"), v); };
    t["filter"] = [need](Interpreter&, const Value&, const CallArgs& a) { return has_filter(to_str(need(a, "filter"))); };
    t["test"] = [need](Interpreter&, const Value&, const CallArgs& a) { return has_test(to_str(need(a, "test"))); };
    return t;
  }();
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) != 0; }
bool has_test(const std::string& name) { return tests().count(name) != 0; }

Value apply_filter(Interpreter& in, const std::string& name, const Value& subject, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) fail("no filter named '" + name + "'");
  return it->second(in, subject, args);
}

bool apply_test(Interpreter& in, const std::string& name, const Value& subject, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail("no test named '" + name + "'");
  return it->second(in, subject, args);
}

}  // namespace lancet::jinja
