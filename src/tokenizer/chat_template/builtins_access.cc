// Attribute/item access, slicing, iteration, Python operators and the methods of str, dict and
// list. This is where the sandbox's attribute rule lives: there are no Python objects behind
// values, so the only attributes are dict keys, namespace fields and the whitelisted methods
// below; any underscore-prefixed name (__class__, __globals__, ...) is refused outright.
#include <cctype>
#include <cmath>
#include <cstdio>

#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/template_error.h"
#include "tokenizer/chat_template/text_util.h"

namespace lancet::jinja {

namespace {

bool in_list(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

const std::initializer_list<const char*> kStrMethods = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "upper", "lower", "title", "capitalize", "replace", "find", "rfind", "index", "count",
    "join", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "removeprefix",
    "removesuffix", "format"};
const std::initializer_list<const char*> kDictMethods = {"items", "keys", "values", "get"};
const std::initializer_list<const char*> kListMethods = {"index", "count"};
// Known to mutate: ImmutableSandboxedEnvironment (what transformers uses) refuses them too.
const std::initializer_list<const char*> kMutators = {
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
    "setdefault", "popitem", "add", "discard"};

std::string arg_str(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = a.get(i, name);
  if (!v || !v->is_string()) fail(std::string(method) + "() argument '" + name + "' must be a string");
  return v->str();
}

Value list_of_strings(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::list(std::move(out));
}

// printf-style `"fmt" % args`, for the few templates that use it: %s %r %d %i %f %e %x %%
// with flags, width and precision.
std::string percent_format(Interpreter& in, const std::string& fmt, const Value& args) {
  std::vector<Value> vals = args.is_list() && args.list().tuple ? args.items() : std::vector<Value>{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    while (j < fmt.size() && std::string_view("-+ 0#").find(fmt[j]) != std::string_view::npos) ++j;
    while (j < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[j])) || fmt[j] == '.')) ++j;
    if (j >= fmt.size()) fail("incomplete format");
    char conv = fmt[j];
    std::string spec = fmt.substr(i, j - i);
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= vals.size()) fail("not enough arguments for format string");
    const Value& v = vals[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? to_str(v) : repr(v);
      // Width applies to the whole string; pad manually to avoid truncating long values.
      int width = std::atoi(spec.c_str() + 1 + (spec.size() > 1 && spec[1] == '-' ? 1 : 0));
      int fill = width - static_cast<int>(codepoint_count(s));
      if (fill > 0 && spec.find('-') != std::string::npos) s += std::string(static_cast<size_t>(fill), ' ');
      else if (fill > 0) s = std::string(static_cast<size_t>(fill), ' ') + s;
      out += s;
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number()) fail(std::string("%") + conv + " format: a number is required, not " + type_name(v));
      int64_t n = v.is_float() ? static_cast<int64_t>(v.number()) : v.integer();
      std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), static_cast<long long>(n));
      out += buf;
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' || conv == 'G') {
      if (!v.is_number()) fail(std::string("%") + conv + " format: a number is required, not " + type_name(v));
      std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.number());
      out += buf;
    } else {
      fail(std::string("unsupported format character '") + conv + "'");
    }
    in.check_size(out.size());
  }
  if (next < vals.size() && !(vals.size() == 1 && !args.is_list())) fail("not all arguments converted during string formatting");
  return out;
}

Value str_method(Interpreter& in, const std::string& s, const std::string& m, const CallArgs& a) {
  in.charge(1 + s.size() / 64);
  auto opt_chars = [&](std::string* holder) -> const std::string* {
    const Value* v = a.get(0, "chars");
    if (!v || v->is_none()) return nullptr;
    if (!v->is_string()) fail(m + "() argument must be a string or None");
    *holder = v->str();
    return holder;
  };
  std::string holder;
  if (m == "strip") return Value(py_strip(s, opt_chars(&holder), true, true));
  if (m == "lstrip") return Value(py_strip(s, opt_chars(&holder), true, false));
  if (m == "rstrip") return Value(py_strip(s, opt_chars(&holder), false, true));
  if (m == "split" || m == "rsplit") {
    const Value* sep = a.get(0, "sep");
    const Value* maxv = a.get(1, "maxsplit");
    long maxsplit = maxv ? static_cast<long>(maxv->integer()) : -1;
    std::string sep_s;
    const std::string* sep_p = nullptr;
    if (sep && !sep->is_none()) {
      if (!sep->is_string()) fail(m + "() separator must be a string or None");
      sep_s = sep->str();
      if (sep_s.empty()) fail("empty separator");
      sep_p = &sep_s;
    }
    return list_of_strings(m == "split" ? py_split(s, sep_p, maxsplit) : py_rsplit(s, sep_p, maxsplit));
  }
  if (m == "splitlines") return list_of_strings(py_splitlines(s));
  if (m == "startswith" || m == "endswith") {
    const Value* p = a.get(0, "prefix");
    if (!p) fail(m + "() takes at least 1 argument");
    std::vector<Value> cands = p->is_list() ? p->items() : std::vector<Value>{*p};
    for (const Value& c : cands) {
      if (!c.is_string()) fail(m + "() first arg must be str or a tuple of str");
      const std::string& x = c.str();
      bool hit = m == "startswith" ? s.compare(0, x.size(), x) == 0
                                   : (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (m == "upper") return Value(py_upper(s));
  if (m == "lower") return Value(py_lower(s));
  if (m == "title") return Value(py_str_title(s));
  if (m == "capitalize") return Value(py_capitalize(s));
  if (m == "replace") {
    std::string old_s = arg_str(a, 0, "old", "replace");
    std::string new_s = arg_str(a, 1, "new", "replace");
    const Value* c = a.get(2, "count");
    long count = c ? static_cast<long>(c->integer()) : -1;
    // Bound the result before building it: each replacement can grow the string.
    if (new_s.size() > old_s.size()) {
      size_t hits = old_s.empty() ? codepoint_count(s) + 1 : 0;
      for (size_t f = old_s.empty() ? std::string::npos : s.find(old_s); f != std::string::npos; f = s.find(old_s, f + old_s.size())) ++hits;
      in.check_size(s.size() + hits * (new_s.size() - old_s.size()));
    }
    return Value(py_replace(s, old_s, new_s, count));
  }
  if (m == "find" || m == "rfind" || m == "index") {
    std::string sub = arg_str(a, 0, "sub", m.c_str());
    size_t f = m == "rfind" ? s.rfind(sub) : s.find(sub);
    if (f == std::string::npos) {
      if (m == "index") fail("substring not found");
      return Value(-1);
    }
    return Value(static_cast<int64_t>(codepoint_count(std::string_view(s).substr(0, f))));
  }
  if (m == "count") {
    std::string sub = arg_str(a, 0, "sub", "count");
    if (sub.empty()) return Value(static_cast<int64_t>(codepoint_count(s) + 1));
    int64_t n = 0;
    for (size_t f = s.find(sub); f != std::string::npos; f = s.find(sub, f + sub.size())) ++n;
    return Value(n);
  }
  if (m == "join") {
    const Value* it = a.get(0, "iterable");
    if (!it) fail("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(*it)) {
      if (!v.is_string()) fail(std::string("sequence item: expected str instance, ") + type_name(v) + " found");
      if (!first) out += s;
      first = false;
      out += v.str();
      in.check_size(out.size());
    }
    return Value(std::move(out));
  }
  if (m == "removeprefix") {
    std::string p = arg_str(a, 0, "prefix", "removeprefix");
    return Value(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
  }
  if (m == "removesuffix") {
    std::string p = arg_str(a, 0, "suffix", "removesuffix");
    bool hit = !p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
    return Value(hit ? s.substr(0, s.size() - p.size()) : s);
  }
  if (m == "format") fail("str.format() is not supported in templates");
  auto all = [&](auto pred) {
    if (s.empty()) return Value(false);
    for (char c : s)
      if (!pred(static_cast<unsigned char>(c))) return Value(false);
    return Value(true);
  };
  if (m == "isdigit") return all([](unsigned char c) { return std::isdigit(c) != 0; });
  if (m == "isalpha") return all([](unsigned char c) { return std::isalpha(c) != 0; });
  if (m == "isalnum") return all([](unsigned char c) { return std::isalnum(c) != 0; });
  if (m == "isspace") return all([](unsigned char c) { return is_py_space(c); });
  if (m == "isupper" || m == "islower") {
    bool cased = false;
    for (char c : s) {
      if (std::isalpha(static_cast<unsigned char>(c))) {
        cased = true;
        if ((m == "isupper") != (std::isupper(static_cast<unsigned char>(c)) != 0)) return Value(false);
      }
    }
    return Value(cased);
  }
  fail("str has no method '" + m + "'");
}

Value dict_method(Interpreter& in, const DictData& d, const std::string& m, const CallArgs& a) {
  in.charge(1 + d.size());
  if (m == "get") {
    const Value* k = a.get(0, "key");
    if (!k) fail("get() takes at least 1 argument");
    const Value* dflt = a.get(1, "default");
    const Value* v = k->is_string() ? d.find(k->str()) : nullptr;
    return v ? *v : (dflt ? *dflt : Value::none());
  }
  std::vector<Value> out;
  out.reserve(d.size());
  for (const auto& [k, v] : d.entries()) {
    if (m == "keys") out.emplace_back(k);
    else if (m == "values") out.push_back(v);
    else out.push_back(Value::list({Value(k), v}, true));
  }
  return Value::list(std::move(out));
}

Value list_method(Interpreter& in, const std::vector<Value>& l, const std::string& m, const CallArgs& a) {
  in.charge(1 + l.size());
  const Value* x = a.get(0, "value");
  if (!x) fail(m + "() takes exactly one argument");
  int64_t n = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (equals(l[i], *x)) {
      if (m == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
  }
  if (m == "index") fail("value is not in list");
  return Value(n);
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string method) : Callable(std::move(method)), self_(std::move(self)) {}
  Value call(Interpreter& in, const CallArgs& args) const override {
    const std::string& m = name();
    if (in_list(m, kMutators)) {
      fail(std::string(type_name(self_)) + "." + m + "() is not allowed: template values are immutable");
    }
    if (self_.is_string()) return str_method(in, self_.str(), m, args);
    if (self_.is_dict()) return dict_method(in, self_.dict(), m, args);
    if (self_.is_list()) return list_method(in, self_.items(), m, args);
    fail(std::string(type_name(self_)) + " has no method '" + m + "'");
  }

 private:
  Value self_;
};

Value method(const Value& self, const std::string& name) {
  return Value::callable(std::make_shared<BoundMethod>(self, name));
}

std::string undefined_path(const Value& obj, const std::string& attr) {
  if (obj.is_undefined() && !obj.undefined_name().empty()) return obj.undefined_name() + "." + attr;
  return attr;
}

// Python's slice index normalization (PySlice_AdjustIndices).
void adjust(int64_t n, const Value& start, const Value& stop, int64_t step, int64_t* b, int64_t* e) {
  auto norm = [&](const Value& v, int64_t dflt) -> int64_t {
    if (v.is_none() || v.is_undefined()) return dflt;
    if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None");
    int64_t x = v.integer();
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  *b = norm(start, step < 0 ? n - 1 : 0);
  *e = norm(stop, step < 0 ? -1 : n);
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_') {
    if (obj.is_dict()) {
      if (const Value* v = obj.dict().find(name)) return *v;
    }
    fail("access to attribute " + name + " is not allowed");
  }
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (in_list(name, kDictMethods) || in_list(name, kMutators)) return method(obj, name);
      if (const Value* v = obj.dict().find(name)) return *v;
      return Value::undefined(name);
    case Value::Kind::kNamespace:
      if (const Value* v = obj.ns().find(name)) return *v;
      return Value::undefined(name);
    case Value::Kind::kString:
      if (in_list(name, kStrMethods)) return method(obj, name);
      return Value::undefined(name);
    case Value::Kind::kList:
      if (in_list(name, kListMethods) || in_list(name, kMutators)) return method(obj, name);
      return Value::undefined(name);
    default:
      return Value::undefined(undefined_path(obj, name));
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (key.is_string()) {
    if (obj.is_dict()) {
      if (const Value* v = obj.dict().find(key.str())) return *v;
    }
    return get_attr(obj, key.str());  // Jinja falls back to attribute lookup
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.integer();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("");
      return obj.items()[static_cast<size_t>(i)];
    }
    std::vector<size_t> off = codepoint_offsets(obj.str());
    const auto n = static_cast<int64_t>(off.size() - 1);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("");
    const auto k = static_cast<size_t>(i);
    return Value(obj.str().substr(off[k], off[k + 1] - off[k]));
  }
  if (obj.is_undefined()) return Value::undefined(obj.undefined_name());
  return Value::undefined("");
}

Value slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  int64_t step = 1;
  if (!step_v.is_none()) {
    if (!step_v.is_int()) fail("slice indices must be integers or None");
    step = step_v.integer();
    if (step == 0) fail("slice step cannot be zero");
  }
  int64_t b, e;
  if (obj.is_list()) {
    const auto& items = obj.items();
    in.charge(items.size());
    adjust(static_cast<int64_t>(items.size()), start, stop, step, &b, &e);
    std::vector<Value> out;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) out.push_back(items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.list().tuple);
  }
  if (obj.is_string()) {
    const std::string& s = obj.str();
    in.charge(s.size() / 64);
    std::vector<size_t> off = codepoint_offsets(s);
    adjust(static_cast<int64_t>(off.size() - 1), start, stop, step, &b, &e);
    if (step == 1) return Value(b < e ? s.substr(off[static_cast<size_t>(b)], off[static_cast<size_t>(e)] - off[static_cast<size_t>(b)]) : std::string());
    std::string out;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
      const auto k = static_cast<size_t>(i);
      out += s.substr(off[k], off[k + 1] - off[k]);
    }
    return Value(std::move(out));
  }
  if (obj.is_undefined()) return obj;
  fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().size());
      for (const auto& [k, val] : v.dict().entries()) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<size_t> off = codepoint_offsets(v.str());
      std::vector<Value> chars;
      chars.reserve(off.size());
      for (size_t k = 0; k + 1 < off.size(); ++k) chars.emplace_back(v.str().substr(off[k], off[k + 1] - off[k]));
      return chars;
    }
    default: fail(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

bool contains(const Value& c, const Value& item) {
  switch (c.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) fail(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      return c.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : c.items())
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::kDict: return item.is_string() && c.dict().find(item.str()) != nullptr;
    case Value::Kind::kNamespace: return item.is_string() && c.ns().find(item.str()) != nullptr;
    case Value::Kind::kUndefined: return false;
    default: fail(std::string("argument of type '") + type_name(c) + "' is not iterable");
  }
}

namespace {

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  for (const Value* v : {&a, &b}) {
    if (v->is_undefined()) {
      fail("'" + (v->undefined_name().empty() ? std::string("value") : v->undefined_name()) + "' is undefined");
    }
  }
  fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value(std::string()) : Value::list({}, seq.is_list() && seq.list().tuple);
  size_t unit = seq.is_string() ? seq.str().size() : seq.items().size();
  if (unit != 0 && static_cast<uint64_t>(n) > in.limits().max_output_bytes / unit) in.check_size(in.limits().max_output_bytes + 1);
  in.charge(unit * static_cast<uint64_t>(n) / 64);
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.list().tuple);
}

void check_overflow(bool overflow) {
  if (overflow) fail("integer overflow");
}

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string l = to_str(a), r = to_str(b);
    in.check_size(l.size() + r.size());
    in.charge((l.size() + r.size()) / 64);
    return Value(l + r);
  }
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      check_overflow(__builtin_add_overflow(a.integer(), b.integer(), &r));
      return Value(r);
    }
    if (nums) return Value(a.number() + b.number());
    if (a.is_string() && b.is_string()) {
      in.check_size(a.str().size() + b.str().size());
      in.charge((a.str().size() + b.str().size()) / 64);
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      in.check_size(a.items().size() + b.items().size());
      in.charge(a.items().size() + b.items().size());
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.list().tuple && b.list().tuple);
    }
    bad_operands(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      check_overflow(__builtin_sub_overflow(a.integer(), b.integer(), &r));
      return Value(r);
    }
    if (nums) return Value(a.number() - b.number());
    bad_operands(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      check_overflow(__builtin_mul_overflow(a.integer(), b.integer(), &r));
      return Value(r);
    }
    if (nums) return Value(a.number() * b.number());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(in, a, b.integer());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(in, b, a.integer());
    bad_operands(op, a, b);
  }
  if (op == "/") {
    if (!nums) bad_operands(op, a, b);
    if (b.number() == 0) fail("division by zero");
    return Value(a.number() / b.number());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return Value(percent_format(in, a.str(), b));
    if (!nums) bad_operands(op, a, b);
    if (b.number() == 0) fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (ints) {
      int64_t x = a.integer(), y = b.integer();
      if (x == INT64_MIN && y == -1) fail("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    double x = a.number(), y = b.number();
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(op == "//" ? std::floor(x / y) : m);
  }
  if (op == "**") {
    if (ints && b.integer() >= 0) {
      int64_t base = a.integer(), e = b.integer(), acc = 1;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) fail("integer overflow");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
      }
      return Value(acc);
    }
    if (nums) return Value(std::pow(a.number(), b.number()));
    bad_operands(op, a, b);
  }
  fail("unknown operator " + op);
}

}  // namespace lancet::jinja
