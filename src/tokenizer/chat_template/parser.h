// Builds the syntax tree from tokens with Jinja's grammar and operator precedence
// (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < postfix/filters/tests).
#pragma once

#include <vector>

#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/lexer.h"

namespace lancet::jinja {

// Throws TemplateError (with line and column) on a syntax error or nesting deeper than
// max_depth (deep nesting would otherwise overflow the evaluator's stack).
Body parse_template(const std::vector<Token>& tokens, int max_depth);

}  // namespace lancet::jinja
