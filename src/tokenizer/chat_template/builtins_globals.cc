// Global functions a template can call: range (capped like Jinja's sandbox), namespace,
// dict, raise_exception (transformers) and strftime_now (transformers).
#include <ctime>
#include <functional>

#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/template_error.h"

namespace lancet::jinja {

namespace {

class NativeFn : public Callable {
 public:
  using Fn = std::function<Value(Interpreter&, const CallArgs&)>;
  NativeFn(std::string name, Fn fn) : Callable(std::move(name)), fn_(std::move(fn)) {}
  Value call(Interpreter& in, const CallArgs& args) const override { return fn_(in, args); }

 private:
  Fn fn_;
};

int64_t int_arg(const Value& v, const char* fn) {
  if (!v.is_int() && !v.is_bool()) fail(std::string(fn) + "() arguments must be integers, not " + type_name(v));
  return v.integer();
}

Value range_fn(Interpreter& in, const CallArgs& a) {
  if (a.pos.empty() || a.pos.size() > 3 || !a.kw.empty()) fail("range() takes 1 to 3 positional arguments");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = int_arg(a.pos[0], "range");
  } else {
    start = int_arg(a.pos[0], "range");
    stop = int_arg(a.pos[1], "range");
    if (a.pos.size() == 3) step = int_arg(a.pos[2], "range");
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  // Count without overflow: the span can exceed int64 for hostile arguments.
  __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  __int128 astep = step > 0 ? step : -static_cast<__int128>(step);
  __int128 count = span <= 0 ? 0 : (span + astep - 1) / astep;
  if (count > in.limits().max_range) {
    fail_limit("range too big: the sandbox blocks ranges larger than " + std::to_string(in.limits().max_range));
  }
  in.charge(static_cast<uint64_t>(count));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.emplace_back(start + i * step);
  return Value::list(std::move(out));
}

Value kwargs_dict(const CallArgs& a, const char* fn) {
  DictData d;
  if (a.pos.size() > 1) fail(std::string(fn) + "() takes at most one positional argument");
  if (!a.pos.empty()) {
    if (!a.pos[0].is_dict()) fail(std::string(fn) + "() positional argument must be a mapping");
    for (const auto& [k, v] : a.pos[0].dict().entries()) d.set(k, v);
  }
  for (const auto& [k, v] : a.kw) d.set(k, v);
  return Value::dict(std::move(d));
}

}  // namespace

DictData make_globals() {
  DictData g;
  auto add = [&g](const char* name, NativeFn::Fn fn) {
    g.set(name, Value::callable(std::make_shared<NativeFn>(name, std::move(fn))));
  };
  add("range", range_fn);
  add("namespace", [](Interpreter& in, const CallArgs& a) {
    Value d = kwargs_dict(a, "namespace");
    return in.new_namespace(d.dict());
  });
  add("dict", [](Interpreter&, const CallArgs& a) { return kwargs_dict(a, "dict"); });
  add("raise_exception", [](Interpreter&, const CallArgs& a) -> Value {
    const Value* msg = a.get(0, "message");
    fail("raise_exception: " + (msg ? to_str(*msg) : std::string("template raised an exception")));
  });
  add("strftime_now", [](Interpreter&, const CallArgs& a) {
    const Value* fmt = a.get(0, "format");
    if (!fmt || !fmt->is_string()) fail("strftime_now() needs a format string");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), fmt->str().c_str(), &tm);
    return Value(std::string(buf, n));
  });
  return g;
}

}  // namespace lancet::jinja
