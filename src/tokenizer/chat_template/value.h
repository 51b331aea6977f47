// The interpreter's value type: Python-like values as Jinja sees them (undefined, None, bool,
// int, float, str, list/tuple, dict with insertion order, namespace, callables). Lists, dicts
// and strings are immutable and shared, so copying a Value is cheap and a compiled template's
// constants can be read from many threads; only namespace() objects are mutable (per render).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace lancet::jinja {

class Value;
class Interpreter;

struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // only changes repr(): (1, 2) instead of [1, 2]
};

// String-keyed dict that keeps insertion order, like a Python dict built from JSON.
class DictData {
 public:
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);  // replaces in place or appends
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  // Defined in value.cc, where Value is complete (clang instantiates vector members eagerly).
  size_t size() const;
  void clear();

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* kwarg(std::string_view name) const;
  // Positional index i, else keyword `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
};

class Callable {
 public:
  explicit Callable(std::string name) : name_(std::move(name)) {}
  virtual ~Callable() = default;
  virtual Value call(Interpreter& in, const CallArgs& args) const = 0;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() : v_(Undef{}) {}
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(std::shared_ptr<const std::string> s) : v_(std::move(s)) {}

  static Value undefined(std::string name);
  static Value none() { Value v; v.v_ = nullptr; return v; }
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(DictData d);
  static Value make_namespace(DictData d);
  static Value callable(std::shared_ptr<const Callable> c);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool boolean() const { return std::get<bool>(v_); }
  int64_t integer() const { return is_bool() ? (boolean() ? 1 : 0) : std::get<int64_t>(v_); }
  double number() const { return is_float() ? std::get<double>(v_) : static_cast<double>(integer()); }
  const std::string& str() const { return *std::get<StrPtr>(v_); }
  const std::shared_ptr<const std::string>& str_ptr() const { return std::get<StrPtr>(v_); }
  const ListData& list() const { return *std::get<ListPtr>(v_); }
  const std::vector<Value>& items() const { return list().items; }
  const DictData& dict() const { return *std::get<DictPtr>(v_); }
  DictData& ns() const { return *std::get<NsRef>(v_).p; }
  const Callable& fn() const { return *std::get<FnPtr>(v_); }
  // The variable name an undefined value came from, for error messages.
  const std::string& undefined_name() const { return std::get<Undef>(v_).name; }

 private:
  struct Undef { std::string name; };
  struct NsRef { std::shared_ptr<DictData> p; };
  using StrPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const ListData>;
  using DictPtr = std::shared_ptr<const DictData>;
  using FnPtr = std::shared_ptr<const Callable>;
  std::variant<Undef, std::nullptr_t, bool, int64_t, double, StrPtr, ListPtr, DictPtr, NsRef, FnPtr> v_;
};

// Python semantics shared by the evaluator and the builtins.
const char* type_name(const Value& v);  // "int", "str", "list", ...
bool truthy(const Value& v);
std::string to_str(const Value& v);   // str(v); undefined -> ""
std::string repr(const Value& v);     // repr(v)
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0; throws for unorderable types
// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys, separators=...) with
// Python's default separators (", " / ": ", or "," / ": " when indented) unless given.
// indent < 0 means None.
struct JsonFormat {
  int indent = -1;
  bool sort_keys = false;
  const std::string* item_sep = nullptr;
  const std::string* key_sep = nullptr;
};
std::string to_json(const Value& v, const JsonFormat& fmt);

// Converts request data into template values, keeping the object key order of the input
// (nlohmann::json sorts keys; nlohmann::ordered_json keeps them). Nesting deeper than
// max_depth is an error.
Value from_json(const nlohmann::json& j, int max_depth);
Value from_json(const nlohmann::ordered_json& j, int max_depth);

}  // namespace lancet::jinja
