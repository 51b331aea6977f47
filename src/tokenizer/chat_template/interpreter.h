// Renders a parsed template against a context. One Interpreter per render call: it owns the
// scopes, the output buffers and the sandbox counters (operation budget, output size, call
// depth), so a compiled template can render on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/value.h"

namespace lancet::jinja {

struct Limits {
  uint64_t max_operations = 10'000'000;
  size_t max_output_bytes = 4u << 20;
  int max_call_depth = 64;
  int64_t max_range = 100'000;
};

class Interpreter {
 public:
  // `context` holds the caller's variables; builtin globals (range, namespace, ...) sit below it.
  Interpreter(const Limits& limits, const DictData& context);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Throws TemplateError.
  std::string render(const Body& body);

  // ---- used by builtins and callables ----
  const Limits& limits() const { return limits_; }
  // Counts n units of work against the operation budget.
  void charge(uint64_t n) {
    ops_ += n;
    if (ops_ > limits_.max_operations) budget_exceeded();
  }
  // Fails when a string or list of this many bytes/items would pass the output size cap.
  void check_size(size_t n) const;
  Value call(const Value& callee, const CallArgs& args);
  // namespace(): the only mutable value, so the only way to build a reference cycle
  // ({% set ns.self = [ns] %}); the interpreter empties every namespace when it finishes.
  Value new_namespace(DictData fields);
  // Runs a macro body in a fresh scope below the template's top level; returns its output.
  Value call_macro(const Stmt& macro, const CallArgs& args, const Value* caller);
  // Renders the body of a {% call %} block for caller(...).
  struct Scope;
  Value call_caller(const Stmt& block, Scope* scope, const CallArgs& args);

  // The current for-loop iteration; the `loop` variable is built from it only when used.
  struct LoopState {
    const std::vector<Value>* items = nullptr;
    int64_t index = 0;
    mutable Value materialized;  // undefined until first use
  };

  // Variables of one block level. Scopes hold a handful of names, so a vector beats a hash
  // map (one allocation per for-loop iteration instead of a table).
  struct Scope {
    Scope* parent = nullptr;
    const LoopState* loop = nullptr;
    std::vector<std::pair<std::string, Value>> vars;
    void set(const std::string& name, Value v) {
      for (auto& [k, old] : vars) {
        if (k == name) {
          old = std::move(v);
          return;
        }
      }
      vars.emplace_back(name, std::move(v));
    }
  };

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] void budget_exceeded() const;
  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  void exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  void exec_call_block(const Stmt& s);
  void emit(const std::string& text);
  std::string capture(const Body& body, Scope* scope);

  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value lookup(const std::string& name) const;
  static Value loop_value(const LoopState& st);
  void assign(const std::vector<std::string>& targets, const Value& v, SourcePos pos);
  CallArgs eval_args(const Expr& e, size_t first);

  const Limits limits_;
  const DictData& context_;
  DictData globals_;
  Scope root_;
  Scope* scope_ = &root_;
  std::string* out_ = nullptr;
  std::vector<Value> namespaces_;
  uint64_t ops_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
};

}  // namespace lancet::jinja
