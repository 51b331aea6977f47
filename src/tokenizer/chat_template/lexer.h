// Splits template source into tokens: raw text between tags, tag delimiters, and expression
// tokens inside tags. Whitespace control happens here, as in Jinja's lexer: `{%-`/`-%}` strip
// around a tag, trim_blocks drops the newline after a block or comment tag, lstrip_blocks drops
// the indentation before one, and a single trailing newline of the source is removed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template/template_error.h"

namespace lancet::jinja {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type = Tok::kEof;
  std::string text;  // text data, name, operator, or the decoded string literal
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws TemplateError on an unterminated tag, string or comment.
std::vector<Token> tokenize(std::string_view source, const LexOptions& opts);

}  // namespace lancet::jinja
