// Recursive-descent parser for the Jinja subset (see parser.h). Statements: if/elif/else,
// for (with filter, else, tuple targets), set (plain, tuple, namespace attribute, block),
// macro, call, filter, break/continue, do, generation; anything else is a clear error.
#include "tokenizer/chat_template/parser.h"

#include <initializer_list>

namespace lancet::jinja {

namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& t, int max_depth) : t_(t), max_depth_(max_depth) {}

  Body parse_all() {
    std::string end;
    Body b = parse_body({}, &end);
    return b;
  }

 private:
  struct DepthGuard {
    Parser* p;
    DepthGuard(Parser* parser, SourcePos pos) : p(parser) {
      if (++p->depth_ > p->max_depth_) fail_limit("template nests too deeply", pos);
    }
    ~DepthGuard() { --p->depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kEof: return "end of template";
      case Tok::kBlockEnd: return "'%}'";
      case Tok::kVarEnd: return "'}}'";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kText: return "text";
      case Tok::kString: return "string literal";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] void unexpected(const std::string& wanted) const {
    fail("expected " + wanted + ", got " + describe(cur()), cur().pos);
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) unexpected(std::string("'") + op + "'");
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) unexpected("a name");
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) unexpected("'%}'");
    advance();
  }

  static ExprPtr make(ExprKind k, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = pos;
    return e;
  }
  static StmtPtr make_stmt(StmtKind k, SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->pos = pos;
    return s;
  }

  // Parses statements until a block tag whose keyword is in `ends`; leaves the cursor on that
  // keyword and stores it in *found.
  Body parse_body(std::initializer_list<const char*> ends, std::string* found) {
    DepthGuard g(this, cur().pos);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::kEof) {
        if (ends.size() == 0) return body;
        std::string want;
        for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
        fail("unexpected end of template, expected " + want, t.pos);
      }
      if (t.type == Tok::kText) {
        auto s = make_stmt(StmtKind::kText, t.pos);
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == Tok::kVarBegin) {
        auto s = make_stmt(StmtKind::kPrint, t.pos);
        advance();
        s->expr = parse_tuple(true, false);
        if (cur().type != Tok::kVarEnd) unexpected("'}}'");
        advance();
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        const Token& kw = peek();
        if (kw.type != Tok::kName) {
          advance();
          unexpected("a statement name");
        }
        for (const char* e : ends) {
          if (kw.text == e) {
            advance();  // onto the keyword
            *found = kw.text;
            return body;
          }
        }
        advance();
        body.push_back(parse_statement());
      } else {
        unexpected("text or a tag");
      }
    }
  }

  StmtPtr parse_statement() {
    const Token kw = cur();
    advance();
    const std::string& k = kw.text;
    if (k == "if") return parse_if(kw.pos);
    if (k == "for") return parse_for(kw.pos);
    if (k == "set") return parse_set(kw.pos);
    if (k == "macro") return parse_macro(kw.pos);
    if (k == "call") return parse_call_block(kw.pos);
    if (k == "filter") return parse_filter_block(kw.pos);
    if (k == "break" || k == "continue") {
      auto s = make_stmt(k == "break" ? StmtKind::kBreak : StmtKind::kContinue, kw.pos);
      expect_block_end();
      return s;
    }
    if (k == "do") {
      auto s = make_stmt(StmtKind::kDo, kw.pos);
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    if (k == "generation") {
      // transformers' assistant-mask marker: the body renders as is.
      auto s = make_stmt(StmtKind::kScope, kw.pos);
      expect_block_end();
      std::string end;
      s->body = parse_body({"endgeneration"}, &end);
      advance();
      expect_block_end();
      return s;
    }
    fail("unknown or unsupported tag '" + k + "'", kw.pos);
  }

  StmtPtr parse_if(SourcePos pos) {
    auto s = make_stmt(StmtKind::kIf, pos);
    ExprPtr cond = parse_tuple(false, false);
    while (true) {
      expect_block_end();
      std::string end;
      Body b = parse_body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(cond), std::move(b));
      advance();  // past the keyword
      if (end == "elif") {
        cond = parse_tuple(false, false);
        continue;
      }
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, &end);
        advance();
      }
      expect_block_end();
      return s;
    }
  }

  void parse_targets(Stmt* s, bool allow_attr) {
    bool paren = skip_op("(");
    s->targets.push_back(expect_name());
    if (allow_attr && !paren && skip_op(".")) {
      s->attr = expect_name();
      return;
    }
    while (skip_op(",")) {
      if (paren && is_op(")")) break;
      s->targets.push_back(expect_name());
    }
    if (paren) expect_op(")");
  }

  StmtPtr parse_for(SourcePos pos) {
    auto s = make_stmt(StmtKind::kFor, pos);
    parse_targets(s.get(), false);
    if (!skip_name("in")) unexpected("'in'");
    s->expr = parse_tuple(false, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail("recursive for loops are not supported", cur().pos);
    expect_block_end();
    std::string end;
    s->body = parse_body({"else", "endfor"}, &end);
    advance();
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end);
      advance();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(SourcePos pos) {
    auto s = make_stmt(StmtKind::kSet, pos);
    parse_targets(s.get(), true);
    if (skip_op("=")) {
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    if (s->targets.size() != 1 || !s->attr.empty()) unexpected("'='");
    s->kind = StmtKind::kSetBlock;
    expect_block_end();
    std::string end;
    s->body = parse_body({"endset"}, &end);
    advance();
    expect_block_end();
    return s;
  }

  void parse_params(Stmt* s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      s->params.push_back(std::move(p));
    }
    advance();
  }

  StmtPtr parse_macro(SourcePos pos) {
    auto s = make_stmt(StmtKind::kMacro, pos);
    s->text = expect_name();
    parse_params(s.get());
    expect_block_end();
    std::string end;
    s->body = parse_body({"endmacro"}, &end);
    advance();
    if (cur().type == Tok::kName && cur().text == s->text) advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(SourcePos pos) {
    auto s = make_stmt(StmtKind::kCallBlock, pos);
    if (is_op("(")) parse_params(s.get());
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail("{% call %} needs a macro call", pos);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endcall"}, &end);
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(SourcePos pos) {
    auto s = make_stmt(StmtKind::kFilterBlock, pos);
    ExprPtr chain;  // filters applied in order; the innermost subject stays null
    do {
      chain = parse_filter(std::move(chain));
    } while (skip_op("|"));
    s->expr = std::move(chain);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endfilter"}, &end);
    advance();
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  bool at_tuple_end(bool explicit_parens) const {
    return cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd ||
           (explicit_parens && is_op(")"));
  }

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens) {
    SourcePos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(explicit_parens)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (items.empty()) {
        if (explicit_parens) return make(ExprKind::kTuple, pos);
        unexpected("an expression");
      }
      return std::move(items[0]);
    }
    auto e = make(ExprKind::kTuple, pos);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      SourcePos pos = cur().pos;
      advance();
      auto c = make(ExprKind::kCondExpr, pos);
      c->args.push_back(parse_or());
      c->args.push_back(std::move(e));
      c->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, SourcePos pos) {
    auto e = make(ExprKind::kBinary, pos);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      SourcePos pos = cur().pos;
      advance();
      l = binary("or", std::move(l), parse_and(), pos);
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      SourcePos pos = cur().pos;
      advance();
      l = binary("and", std::move(l), parse_not(), pos);
    }
    return l;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      SourcePos pos = cur().pos;
      advance();
      DepthGuard g(this, pos);
      auto e = make(ExprKind::kUnary, pos);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    SourcePos pos = cur().pos;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, pos);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      SourcePos pos = cur().pos;
      advance();
      l = binary(op, std::move(l), parse_concat(), pos);
    }
    return l;
  }

  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      SourcePos pos = cur().pos;
      advance();
      l = binary("~", std::move(l), parse_math2(), pos);
    }
    return l;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      SourcePos pos = cur().pos;
      advance();
      l = binary(op, std::move(l), parse_pow(), pos);
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      SourcePos pos = cur().pos;
      advance();
      l = binary("**", std::move(l), parse_unary(true), pos);
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter) {
    SourcePos pos = cur().pos;
    DepthGuard g(this, pos);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      std::string op = cur().text;
      advance();
      node = make(ExprKind::kUnary, pos);
      node->name = op;
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    SourcePos pos = t.pos;
    if (t.type == Tok::kName) {
      auto e = make(ExprKind::kLiteral, pos);
      const std::string& n = t.text;
      if (n == "true" || n == "True") e->value = Value(true);
      else if (n == "false" || n == "False") e->value = Value(false);
      else if (n == "none" || n == "None") e->value = Value::none();
      else {
        e->kind = ExprKind::kName;
        e->name = n;
      }
      advance();
      return e;
    }
    if (t.type == Tok::kString) {
      std::string s;
      while (cur().type == Tok::kString) {  // adjacent literals concatenate, as in Python
        s += cur().text;
        advance();
      }
      auto e = make(ExprKind::kLiteral, pos);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      auto e = make(ExprKind::kLiteral, pos);
      e->value = t.type == Tok::kInt ? Value(t.int_value) : Value(t.float_value);
      advance();
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = parse_tuple(true, true);
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = make(ExprKind::kList, pos);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      advance();
      return e;
    }
    if (skip_op("{")) {
      auto e = make(ExprKind::kDict, pos);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      advance();
      return e;
    }
    unexpected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      SourcePos pos = cur().pos;
      if (skip_op(".")) {
        if (cur().type == Tok::kInt) {
          auto e = make(ExprKind::kGetItem, pos);
          auto idx = make(ExprKind::kLiteral, pos);
          idx->value = Value(cur().int_value);
          advance();
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(idx));
          node = std::move(e);
          continue;
        }
        auto e = make(ExprKind::kGetAttr, pos);
        e->name = expect_name();
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (skip_op("[")) {
        node = parse_subscript(std::move(node), pos);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node, SourcePos pos) {
    ExprPtr start, stop, step;
    if (!is_op(":")) start = parse_expression(true);
    if (!skip_op(":")) {
      expect_op("]");
      auto e = make(ExprKind::kGetItem, pos);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(start));
      return e;
    }
    if (!is_op("]") && !is_op(":")) stop = parse_expression(true);
    if (skip_op(":") && !is_op("]")) step = parse_expression(true);
    expect_op("]");
    auto e = make(ExprKind::kSlice, pos);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(start));
    e->args.push_back(std::move(stop));
    e->args.push_back(std::move(step));
    return e;
  }

  void parse_call_args(Expr* e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args / **kwargs in calls are not supported", cur().pos);
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        std::string k = cur().text;
        advance();
        advance();
        e->kwargs.emplace_back(std::move(k), parse_expression(true));
      } else {
        if (!e->kwargs.empty()) fail("positional argument after keyword argument", cur().pos);
        e->args.push_back(parse_expression(true));
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(ExprKind::kCall, callee->pos);
    e->args.push_back(std::move(callee));
    parse_call_args(e.get());
    return e;
  }

  ExprPtr parse_filter(ExprPtr subject) {
    auto e = make(ExprKind::kFilter, cur().pos);
    e->name = expect_name();
    while (skip_op(".")) {
      e->name += '.';
      e->name += expect_name();
    }
    e->args.push_back(std::move(subject));
    if (is_op("(")) parse_call_args(e.get());
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (skip_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        SourcePos pos = cur().pos;
        advance();
        auto e = make(ExprKind::kTest, pos);
        e->negated = skip_name("not");
        e->name = expect_name();
        while (skip_op(".")) {
      e->name += '.';
      e->name += expect_name();
    }
        e->args.push_back(std::move(node));
        if (is_op("(")) {
          parse_call_args(e.get());
        } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                    cur().type == Tok::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("you cannot chain multiple tests with 'is'", cur().pos);
          e->args.push_back(parse_postfix(parse_primary()));
        }
        node = std::move(e);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  const int max_depth_;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens, int max_depth) {
  return Parser(tokens, max_depth).parse_all();
}

}  // namespace lancet::jinja
