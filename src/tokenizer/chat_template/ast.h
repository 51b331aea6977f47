// Syntax tree of a compiled template. Built once by the parser, then only read (by any number
// of threads) while rendering. One struct per node family with a kind tag keeps the evaluator a
// pair of switch statements.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template/template_error.h"
#include "tokenizer/chat_template/value.h"

namespace lancet::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null = omitted)
  kUnary,     // name in {"-", "+", "not"} applied to args[0]
  kBinary,    // args[0] name args[1]; name in {+ - * / // % ** ~ and or}
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
  kTest,      // args[0] is [not] name(args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs); args[0] null inside {% filter %}
  kCall,      // args[0](args[1..], kwargs)
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  kList,      // [args...]
  kTuple,     // (args...)
  kDict,      // {args[0]: args[1], args[2]: args[3], ...}
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

enum class StmtKind {
  kText,      // text
  kPrint,     // {{ expr }}
  kIf,        // branches; else_body
  kFor,       // for targets in expr [if cond]: body; else_body
  kSet,       // set targets = expr, or set targets[0].attr = expr (namespace)
  kSetBlock,  // {% set targets[0] %}body{% endset %}
  kMacro,     // macro name(params): body
  kCallBlock, // {% call(params) expr %}body{% endcall %}
  kFilterBlock,  // {% filter expr %}body{% endfilter %}
  kBreak,
  kContinue,
  kDo,        // {% do expr %}
  kScope,     // a body rendered as is ({% generation %})
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;                 // kText; kMacro name
  std::string attr;                 // kSet on a namespace attribute
  std::vector<std::string> targets; // kFor / kSet / kSetBlock
  ExprPtr expr;                     // value, condition, iterable, call, filter
  ExprPtr cond;                     // kFor filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;
  Body else_body;
  std::vector<MacroParam> params;   // kMacro, kCallBlock caller params
};

}  // namespace lancet::jinja
