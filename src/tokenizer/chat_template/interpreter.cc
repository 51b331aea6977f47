// Statement execution and expression evaluation (see interpreter.h). Scoping follows Jinja:
// every for-loop iteration and macro call gets a fresh scope, `set` writes the innermost one
// (so only namespace() attributes carry state out of a loop), and macros see the template's
// top level, not their caller's locals.
#include "tokenizer/chat_template/interpreter.h"

#include "tokenizer/chat_template/builtins.h"

namespace lancet::jinja {

namespace {

// Nested evaluation (expressions inside macros inside expressions ...) is bounded so a hostile
// template fails with an error instead of exhausting the thread's stack.
constexpr int kMaxEvalDepth = 1500;

class MacroFn : public Callable {
 public:
  explicit MacroFn(const Stmt& s) : Callable(s.text), stmt_(s) {}
  Value call(Interpreter& in, const CallArgs& args) const override {
    return in.call_macro(stmt_, args, nullptr);
  }
  const Stmt& stmt() const { return stmt_; }

 private:
  const Stmt& stmt_;
};

// caller() inside a macro invoked from {% call %}. The scope it renders in lives on the C++
// stack only while the call block runs; `alive` turns a stored, later-called caller into an
// error instead of a dangling read.
class CallerFn : public Callable {
 public:
  CallerFn(const Stmt& s, Interpreter::Scope* scope, std::shared_ptr<bool> alive)
      : Callable("caller"), stmt_(s), scope_(scope), alive_(std::move(alive)) {}
  Value call(Interpreter& in, const CallArgs& args) const override {
    if (!*alive_) fail("caller() used outside its {% call %} block");
    return in.call_caller(stmt_, scope_, args);
  }

 private:
  const Stmt& stmt_;
  Interpreter::Scope* scope_;
  std::shared_ptr<bool> alive_;
};

struct DepthGuard {
  int& d;
  DepthGuard(int& depth, int max, SourcePos pos) : d(depth) {
    if (++d > max) fail_limit("template nesting or recursion too deep", pos);
  }
  ~DepthGuard() { --d; }
};

}  // namespace

Interpreter::Interpreter(const Limits& limits, const DictData& context)
    : limits_(limits), context_(context), globals_(make_globals()) {}

Interpreter::~Interpreter() {
  for (Value& ns : namespaces_) ns.ns().clear();  // breaks cycles through namespaces
}

Value Interpreter::new_namespace(DictData fields) {
  charge(fields.size() + 1);
  namespaces_.push_back(Value::make_namespace(std::move(fields)));
  return namespaces_.back();
}

void Interpreter::budget_exceeded() const {
  fail_limit("template exceeded its operation budget of " + std::to_string(limits_.max_operations));
}

void Interpreter::check_size(size_t n) const {
  if (n > limits_.max_output_bytes) {
    fail_limit("template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
}

std::string Interpreter::render(const Body& body) {
  std::string out;
  out_ = &out;
  exec_body(body);  // break/continue outside a loop simply end the template
  return out;
}

void Interpreter::emit(const std::string& text) {
  check_size(out_->size() + text.size());
  out_->append(text);
}

std::string Interpreter::capture(const Body& body, Scope* scope) {
  std::string buf;
  std::string* saved_out = out_;
  Scope* saved_scope = scope_;
  out_ = &buf;
  scope_ = scope;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved_out;
    scope_ = saved_scope;
    throw;
  }
  out_ = saved_out;
  scope_ = saved_scope;
  return buf;
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  charge(1);
  DepthGuard g(eval_depth_, kMaxEvalDepth, s.pos);
  switch (s.kind) {
    case StmtKind::kText: emit(s.text); break;
    case StmtKind::kPrint: emit(to_str(eval(*s.expr))); break;
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (truthy(eval(*cond))) return exec_body(body);
      }
      return exec_body(s.else_body);
    case StmtKind::kFor: exec_for(s); break;
    case StmtKind::kSet: exec_set(s); break;
    case StmtKind::kSetBlock: {
      Value v(capture(s.body, scope_));
      scope_->set(s.targets[0], std::move(v));
      break;
    }
    case StmtKind::kMacro:
      scope_->set(s.text, Value::callable(std::make_shared<MacroFn>(s)));
      break;
    case StmtKind::kCallBlock: exec_call_block(s); break;
    case StmtKind::kFilterBlock: {
      Value v(capture(s.body, scope_));
      // The chain was parsed outermost-last; apply from the innermost filter out.
      std::vector<const Expr*> chain;
      for (const Expr* f = s.expr.get(); f; f = f->args[0].get()) chain.push_back(f);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        CallArgs args = eval_args(**it, 1);
        try {
          v = apply_filter(*this, (*it)->name, v, args);
        } catch (TemplateError& e) {
          if (e.pos.line == 0) e.pos = (*it)->pos;
          throw;
        }
      }
      emit(to_str(v));
      break;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kDo: eval(*s.expr); break;
    case StmtKind::kScope: return exec_body(s.body);
  }
  return Flow::kNormal;
}

void Interpreter::exec_for(const Stmt& s) {
  Value iterable = eval(*s.expr);
  if (!iterable.is_undefined() && !iterable.is_list() && !iterable.is_dict() && !iterable.is_string()) {
    fail(std::string("'") + type_name(iterable) + "' object is not iterable", s.expr->pos);
  }
  std::vector<Value> items = iterate(iterable);
  charge(items.size());
  if (s.cond) {
    // Jinja filters first, so loop.length and loop.last see only the kept items.
    std::vector<Value> kept;
    for (const Value& item : items) {
      Scope sc;
      sc.parent = scope_;
      Scope* saved = scope_;
      scope_ = &sc;
      bool keep;
      try {
        assign(s.targets, item, s.pos);
        keep = truthy(eval(*s.cond));
      } catch (...) {
        scope_ = saved;
        throw;
      }
      scope_ = saved;
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body);
    return;
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    charge(1);
    Scope sc;
    sc.parent = scope_;
    Scope* saved = scope_;
    scope_ = &sc;
    Flow f;
    try {
      assign(s.targets, items[static_cast<size_t>(i)], s.pos);
      LoopState state{&items, i, Value()};
      sc.loop = &state;
      f = exec_body(s.body);
    } catch (...) {
      scope_ = saved;
      throw;
    }
    scope_ = saved;
    if (f == Flow::kBreak) break;
  }
}

void Interpreter::assign(const std::vector<std::string>& targets, const Value& v, SourcePos pos) {
  if (targets.size() == 1) {
    scope_->set(targets[0], v);
    return;
  }
  std::vector<Value> parts = iterate(v);
  if (!(v.is_list() || v.is_string() || v.is_dict()) || parts.size() != targets.size()) {
    fail("cannot unpack " + std::string(type_name(v)) + " into " + std::to_string(targets.size()) +
             " names",
         pos);
  }
  for (size_t i = 0; i < targets.size(); ++i) scope_->set(targets[i], parts[i]);
}

void Interpreter::exec_set(const Stmt& s) {
  Value v = eval(*s.expr);
  if (s.attr.empty()) {
    assign(s.targets, v, s.pos);
    return;
  }
  Value target = lookup(s.targets[0]);
  if (!target.is_namespace()) {
    fail("cannot set attribute '" + s.attr + "' on " + type_name(target) +
             " (only namespace() objects can be assigned to)",
         s.pos);
  }
  if (!s.attr.empty() && s.attr[0] == '_') fail("access to attribute " + s.attr + " is not allowed", s.pos);
  target.ns().set(s.attr, std::move(v));
}

void Interpreter::exec_call_block(const Stmt& s) {
  const Expr& call_expr = *s.expr;
  Value callee = eval(*call_expr.args[0]);
  if (!callee.is_callable() || !dynamic_cast<const MacroFn*>(&callee.fn())) {
    fail("{% call %} needs a macro", s.pos);
  }
  CallArgs args = eval_args(call_expr, 1);
  auto alive = std::make_shared<bool>(true);
  Value caller = Value::callable(std::make_shared<CallerFn>(s, scope_, alive));
  Value out;
  try {
    out = call_macro(static_cast<const MacroFn&>(callee.fn()).stmt(), args, &caller);
  } catch (...) {
    *alive = false;
    throw;
  }
  *alive = false;
  emit(to_str(out));
}

Value Interpreter::call_macro(const Stmt& m, const CallArgs& args, const Value* caller) {
  DepthGuard g(call_depth_, limits_.max_call_depth, m.pos);
  Scope sc;
  sc.parent = &root_;
  size_t npos = std::min(args.pos.size(), m.params.size());
  for (size_t i = 0; i < m.params.size(); ++i) {
    const MacroParam& p = m.params[i];
    const Value* given = i < npos ? &args.pos[i] : args.kwarg(p.name);
    if (given) {
      sc.set(p.name, *given);
    } else if (p.default_value) {
      Scope* saved = scope_;
      scope_ = &sc;  // defaults may refer to earlier parameters
      try {
        sc.set(p.name, eval(*p.default_value));
      } catch (...) {
        scope_ = saved;
        throw;
      }
      scope_ = saved;
    } else {
      sc.set(p.name, Value::undefined(p.name));
    }
  }
  std::vector<Value> extra(args.pos.begin() + static_cast<long>(npos), args.pos.end());
  sc.set("varargs", Value::list(std::move(extra), true));
  DictData kw;
  for (const auto& [k, v] : args.kw) {
    bool is_param = false;
    for (const auto& p : m.params) is_param |= p.name == k;
    if (!is_param) kw.set(k, v);
  }
  sc.set("kwargs", Value::dict(std::move(kw)));
  if (caller) sc.set("caller", *caller);
  return Value(capture(m.body, &sc));
}

Value Interpreter::call_caller(const Stmt& block, Scope* scope, const CallArgs& args) {
  DepthGuard g(call_depth_, limits_.max_call_depth, block.pos);
  Scope sc;
  sc.parent = scope;
  for (size_t i = 0; i < block.params.size(); ++i) {
    const Value* given = args.get(i, block.params[i].name);
    sc.set(block.params[i].name, given ? *given : Value::undefined(block.params[i].name));
  }
  return Value(capture(block.body, &sc));
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) {
    fail("'" + (callee.undefined_name().empty() ? std::string("value") : callee.undefined_name()) +
         "' is undefined and cannot be called");
  }
  if (!callee.is_callable()) fail(std::string("'") + type_name(callee) + "' object is not callable");
  return callee.fn().call(*this, args);
}

Value Interpreter::loop_value(const LoopState& st) {
  if (st.materialized.is_undefined()) {
    const auto n = static_cast<int64_t>(st.items->size());
    const int64_t i = st.index;
    const auto& items = *st.items;
    DictData loop;
    loop.set("index", Value(i + 1));
    loop.set("index0", Value(i));
    loop.set("revindex", Value(n - i));
    loop.set("revindex0", Value(n - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == n - 1));
    loop.set("length", Value(n));
    loop.set("depth", Value(1));
    loop.set("depth0", Value(0));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("loop.previtem"));
    loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("loop.nextitem"));
    st.materialized = Value::dict(std::move(loop));
  }
  return st.materialized;
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* s = scope_; s; s = s->parent) {
    for (const auto& [k, v] : s->vars)
      if (k == name) return v;
    if (s->loop && name == "loop") return loop_value(*s->loop);
  }
  if (const Value* v = context_.find(name)) return *v;
  if (const Value* v = globals_.find(name)) return *v;
  return Value::undefined(name);
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs a;
  for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v));
  return a;
}

Value Interpreter::eval(const Expr& e) {
  charge(1);
  DepthGuard g(eval_depth_, kMaxEvalDepth, e.pos);
  try {
    return eval_inner(e);
  } catch (TemplateError& err) {
    // Builtins throw without a position; the innermost expression supplies it.
    if (err.pos.line == 0) err.pos = e.pos;
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.value;
    case ExprKind::kName: return lookup(e.name);
    case ExprKind::kGetAttr: return get_attr(eval(*e.args[0]), e.name);
    case ExprKind::kGetItem: {
      Value obj = eval(*e.args[0]);
      return get_item(obj, eval(*e.args[1]));
    }
    case ExprKind::kSlice: {
      Value obj = eval(*e.args[0]);
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        parts[i] = e.args[i + 1] ? eval(*e.args[i + 1]) : Value::none();
      return slice(*this, obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kUnary: {
      Value v = eval(*e.args[0]);
      if (e.name == "not") return Value(!truthy(v));
      if (v.is_int() || v.is_bool()) {
        if (e.name == "+") return Value(v.integer());
        if (v.integer() == INT64_MIN) fail("integer overflow");
        return Value(-v.integer());
      }
      if (v.is_float()) return Value(e.name == "-" ? -v.number() : v.number());
      fail("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
    }
    case ExprKind::kBinary: {
      if (e.name == "and") {
        Value l = eval(*e.args[0]);
        return truthy(l) ? eval(*e.args[1]) : l;
      }
      if (e.name == "or") {
        Value l = eval(*e.args[0]);
        return truthy(l) ? l : eval(*e.args[1]);
      }
      Value l = eval(*e.args[0]);
      Value r = eval(*e.args[1]);
      return binary_op(*this, e.name, l, r);
    }
    case ExprKind::kCompare: {
      Value l = eval(*e.args[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value r = eval(*e.args[i + 1]);
        const std::string& op = e.ops[i];
        bool ok;
        if (op == "==") ok = equals(l, r);
        else if (op == "!=") ok = !equals(l, r);
        else if (op == "in") ok = contains(r, l);
        else if (op == "not in") ok = !contains(r, l);
        else {
          if (l.is_undefined() || r.is_undefined()) {
            const Value& u = l.is_undefined() ? l : r;
            fail("'" + u.undefined_name() + "' is undefined");
          }
          int c = compare(l, r);
          ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!ok) return Value(false);
        l = std::move(r);
      }
      return Value(true);
    }
    case ExprKind::kTest: {
      Value subject = eval(*e.args[0]);
      CallArgs args = eval_args(e, 1);
      bool r = apply_test(*this, e.name, subject, args);
      return Value(e.negated ? !r : r);
    }
    case ExprKind::kFilter: {
      Value subject = eval(*e.args[0]);
      CallArgs args = eval_args(e, 1);
      return apply_filter(*this, e.name, subject, args);
    }
    case ExprKind::kCall: {
      Value callee = eval(*e.args[0]);
      CallArgs args = eval_args(e, 1);
      return call(callee, args);
    }
    case ExprKind::kCondExpr:
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("");
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      DictData d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i]);
        if (!k.is_string()) fail("dict keys in templates must be strings", e.args[i]->pos);
        d.set(k.str(), eval(*e.args[i + 1]));
      }
      return Value::dict(std::move(d));
    }
  }
  fail("unknown expression");
}

}  // namespace lancet::jinja
