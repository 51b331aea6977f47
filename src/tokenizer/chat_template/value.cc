// Value construction and the Python semantics every part of the interpreter shares:
// truthiness, str()/repr(), ==, ordering, json.dumps and conversion from request JSON.
#include "tokenizer/chat_template/value.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/chat_template/template_error.h"
#include "tokenizer/chat_template/text_util.h"

namespace lancet::jinja {

size_t DictData::size() const { return entries_.size(); }

void DictData::clear() {
  entries_.clear();
  index_.clear();
}


const Value* DictData::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void DictData::set(const std::string& key, Value v) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(v);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(key, std::move(v));
}

const Value* CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

const Value* CallArgs::get(size_t i, std::string_view name) const {
  if (i < pos.size()) return &pos[i];
  return kwarg(name);
}

Value Value::undefined(std::string name) {
  Value v;
  v.v_ = Undef{std::move(name)};
  return v;
}
Value Value::list(std::vector<Value> items, bool tuple) {
  Value v;
  auto d = std::make_shared<ListData>();
  d->items = std::move(items);
  d->tuple = tuple;
  v.v_ = ListPtr(std::move(d));
  return v;
}
Value Value::dict(DictData d) {
  Value v;
  v.v_ = DictPtr(std::make_shared<const DictData>(std::move(d)));
  return v;
}
Value Value::make_namespace(DictData d) {
  Value v;
  v.v_ = NsRef{std::make_shared<DictData>(std::move(d))};
  return v;
}
Value Value::callable(std::shared_ptr<const Callable> c) {
  Value v;
  v.v_ = FnPtr(std::move(c));
  return v;
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.list().tuple ? "tuple" : "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kCallable: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.boolean();
    case Value::Kind::kInt: return v.integer() != 0;
    case Value::Kind::kFloat: return v.number() != 0.0;
    case Value::Kind::kString: return !v.str().empty();
    case Value::Kind::kList: return !v.items().empty();
    case Value::Kind::kDict: return v.dict().size() != 0;
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable: return true;
  }
  return false;
}

namespace {

// Values built inside a template can nest arbitrarily ({% set ns.x = [ns.x] %} in a loop);
// the recursive helpers stop here instead of overflowing the stack.
constexpr int kMaxValueDepth = 256;

void check_depth(int depth) {
  if (depth > kMaxValueDepth) fail_limit("value nests more than 256 levels deep");
}

void repr_into(const Value& v, std::string& out, int depth);

void dict_repr_into(const DictData& d, std::string& out, int depth) {
  out += '{';
  bool first = true;
  for (const auto& [k, val] : d.entries()) {
    if (!first) out += ", ";
    first = false;
    out += py_str_repr(k);
    out += ": ";
    repr_into(val, out, depth + 1);
  }
  out += '}';
}

void repr_into(const Value& v, std::string& out, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::kString: out += py_str_repr(v.str()); return;
    case Value::Kind::kList: {
      const ListData& l = v.list();
      out += l.tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        repr_into(l.items[i], out, depth + 1);
      }
      if (l.tuple && l.items.size() == 1) out += ',';
      out += l.tuple ? ')' : ']';
      return;
    }
    case Value::Kind::kDict: dict_repr_into(v.dict(), out, depth); return;
    case Value::Kind::kUndefined: out += "Undefined"; return;
    case Value::Kind::kNamespace:
      // A namespace may hold itself; the depth check ends the cycle.
      out += "<Namespace ";
      dict_repr_into(v.ns(), out, depth + 1);
      out += '>';
      return;
    default: out += to_str(v);
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.boolean() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.integer());
    case Value::Kind::kFloat: return py_float_repr(v.number());
    case Value::Kind::kString: return v.str();
    case Value::Kind::kList:
    case Value::Kind::kDict: return repr(v);
    case Value::Kind::kNamespace: return repr(v);
    case Value::Kind::kCallable: return "<function " + v.fn().name() + ">";
  }
  return "";
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(v, out, 0);
  return out;
}

namespace {
bool equals_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number() == b.number();
    return a.integer() == b.integer();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size() || a.list().tuple != b.list().tuple) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals_at(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.dict();
      const DictData& y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* o = y.find(k);
        if (!o || !equals_at(v, *o, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return &a.ns() == &b.ns();
    case Value::Kind::kCallable: return &a.fn() == &b.fn();
    default: return false;
  }
}

int compare_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.number(), y = b.number();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.integer(), y = b.integer();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // byte order of UTF-8 == code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals_at(x[i], y[i], depth + 1)) return compare_at(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" +
       type_name(b) + "'");
}
}  // namespace

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }
int compare(const Value& a, const Value& b) { return compare_at(a, b, 0); }

namespace {

void json_into(const Value& v, const JsonFormat& f, int level, std::string& out) {
  const int indent = f.indent;
  const std::string item_sep = f.item_sep ? *f.item_sep : (indent >= 0 ? "," : ", ");
  const std::string key_sep = f.key_sep ? *f.key_sep : ": ";
  check_depth(level);
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * lvl, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.boolean() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.integer()); return;
    case Value::Kind::kFloat: {
      double d = v.number();
      if (d != d) out += "NaN";
      else if (d == INFINITY) out += "Infinity";
      else if (d == -INFINITY) out += "-Infinity";
      else out += py_float_repr(d);
      return;
    }
    case Value::Kind::kString: out += json_escape(v.str()); return;
    case Value::Kind::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(level + 1);
        json_into(items[i], f, level + 1, out);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.dict().entries()) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (f.sort_keys) {
        std::sort(entries.begin(), entries.end(),
                  [](const auto* x, const auto* y) { return x->first < y->first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(level + 1);
        out += json_escape(entries[i]->first);
        out += key_sep;
        json_into(entries[i]->second, f, level + 1, out);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
    }
    default:
      fail(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
}

template <typename Json>
Value from_json_impl(const Json& j, int depth_left) {
  if (depth_left < 0) fail("template input nests too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_impl(e, depth_left - 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictData d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json_impl(it.value(), depth_left - 1));
      return Value::dict(std::move(d));
    }
    default: return Value::undefined("");  // discarded / binary: nothing a template can use
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonFormat& fmt) {
  std::string out;
  json_into(v, fmt, 0, out);
  return out;
}

Value from_json(const nlohmann::json& j, int max_depth) { return from_json_impl(j, max_depth); }
Value from_json(const nlohmann::ordered_json& j, int max_depth) { return from_json_impl(j, max_depth); }

}  // namespace lancet::jinja
