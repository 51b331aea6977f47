// Template lexer (see lexer.h). The rules mirror Jinja 3's lexer so whitespace in rendered
// prompts matches transformers' apply_chat_template byte for byte.
#include "tokenizer/chat_template/lexer.h"
#include "core/utf8_encode.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>


namespace lancet::jinja {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }


class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& opts) : opts_(opts) {
    // Jinja normalizes newlines and drops one trailing newline (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, (tag == std::string::npos ? src_.size() : tag) - pos);
      if (tag == std::string::npos) {
        emit_text(std::move(text), pos);
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && is_ws(text.back())) text.pop_back();
      } else if (sign != '+' && opts_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            std::all_of(text.begin() + l_pos, text.end(), is_ws)) {
          text.resize(l_pos);
        }
      }
      emit_text(std::move(text), pos);
      size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      size_t end = kind == '#' ? lex_comment(tag, body) : lex_tag(tag, body, kind);
      line_starting = end > 0 && src_[end - 1] == '\n';
      pos = end;
    }
    Token eof;
    eof.type = Tok::kEof;
    eof.pos = pos_of(src_.size());
    out_.push_back(eof);
    return std::move(out_);
  }

 private:
  SourcePos pos_of(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    return SourcePos{static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void emit_text(std::string text, size_t offset) {
    if (text.empty()) return;
    Token t;
    t.type = Tok::kText;
    t.text = std::move(text);
    t.pos = pos_of(offset);
    out_.push_back(std::move(t));
  }

  void emit(Tok type, std::string text, size_t offset) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.pos = pos_of(offset);
    out_.push_back(std::move(t));
  }

  // After a closing delimiter: '-' eats all following whitespace; trim_blocks eats one newline.
  size_t after_close(size_t p, bool minus, bool plus, bool block) {
    if (minus) {
      while (p < src_.size() && is_ws(src_[p])) ++p;
    } else if (block && !plus && opts_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  size_t lex_comment(size_t tag, size_t body) {
    size_t close = src_.find("#}", body);
    if (close == std::string::npos) fail("unterminated comment", pos_of(tag));
    bool minus = close > body && src_[close - 1] == '-';
    bool plus = close > body && src_[close - 1] == '+';
    return after_close(close + 2, minus, plus, true);
  }

  size_t lex_tag(size_t tag, size_t p, char kind) {
    const bool block = kind == '%';
    emit(block ? Tok::kBlockBegin : Tok::kVarBegin, "", tag);
    const char close0 = block ? '%' : '}';
    std::vector<char> balance;
    bool after_dot = false;
    while (true) {
      while (p < src_.size() && is_ws(src_[p])) ++p;
      if (p >= src_.size()) fail(block ? "unterminated '{%' tag" : "unterminated '{{' tag", pos_of(tag));
      if (balance.empty()) {
        // End delimiters win over operators only when brackets are balanced (as in Jinja).
        bool minus = src_[p] == '-' || (block && src_[p] == '+');
        size_t q = minus ? p + 1 : p;
        if (q + 1 < src_.size() && src_[q] == close0 && src_[q + 1] == '}') {
          emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "", p);
          return after_close(q + 2, src_[p] == '-', src_[p] == '+', block);
        }
      }
      char c = src_[p];
      size_t start = p;
      if (is_name_start(c)) {
        while (p < src_.size() && is_name_char(src_[p])) ++p;
        emit(Tok::kName, src_.substr(start, p - start), start);
        after_dot = false;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p, after_dot);
        after_dot = false;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
        after_dot = false;
      } else {
        static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* o : kOps2)
          if (src_.compare(p, 2, o) == 0) op = o;
        if (op.empty()) {
          if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
            fail(std::string("unexpected character '") + c + "' in tag", pos_of(p));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty() || balance.back() != op[0]) fail("unexpected '" + op + "'", pos_of(p));
          balance.pop_back();
        }
        emit(Tok::kOp, op, p);
        p += op.size();
        after_dot = op == ".";
      }
    }
  }

  size_t lex_number(size_t p, bool int_only) {
    size_t start = p;
    std::string digits;
    auto take_digits = [&] {
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) ||
                                 (src_[p] == '_' && p + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[p + 1]))))) {
        if (src_[p] != '_') digits += src_[p];
        ++p;
      }
    };
    take_digits();
    bool is_float = false;
    if (!int_only && p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      is_float = true;
      digits += '.';
      ++p;
      take_digits();
    }
    if (!int_only && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        digits += 'e';
        digits += src_.substr(p + 1, q - p - 1);
        p = q;
        take_digits();
      }
    }
    Token t;
    t.pos = pos_of(start);
    t.text = digits;
    if (is_float) {
      t.type = Tok::kFloat;
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      t.type = Tok::kInt;
      errno = 0;
      unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
      if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) fail("integer literal too large", t.pos);
      t.int_value = static_cast<int64_t>(v);
    }
    out_.push_back(std::move(t));
    return p;
  }

  // Python string literal with unicode-escape decoding, as Jinja applies it.
  size_t lex_string(size_t p) {
    const char quote = src_[p];
    size_t start = p++;
    std::string val;
    while (true) {
      if (p >= src_.size()) fail("unterminated string literal", pos_of(start));
      char c = src_[p];
      if (c == quote) {
        ++p;
        break;
      }
      if (c != '\\' || p + 1 >= src_.size()) {
        val += c;
        ++p;
        continue;
      }
      char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) -> uint32_t {
        uint32_t cp = 0;
        for (int k = 0; k < n; ++k, ++p) {
          if (p >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[p])))
            fail("truncated \\x/\\u escape in string literal", pos_of(start));
          char h = src_[p];
          cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return cp;
      };
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': val += '\\'; break;
        case '\'': val += '\''; break;
        case '"': val += '"'; break;
        case 'a': val += '\a'; break;
        case 'b': val += '\b'; break;
        case 'f': val += '\f'; break;
        case 'n': val += '\n'; break;
        case 'r': val += '\r'; break;
        case 't': val += '\t'; break;
        case 'v': val += '\v'; break;
        case 'x': utf8_append_codepoint(hex(2), &val); break;
        case 'u': utf8_append_codepoint(hex(4), &val); break;
        case 'U': utf8_append_codepoint(hex(8), &val); break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k, ++p)
              cp = cp * 8 + static_cast<uint32_t>(src_[p] - '0');
            utf8_append_codepoint(cp, &val);
          } else {
            val += '\\';  // unknown escapes keep their backslash, as in Python
            val += e;
          }
      }
    }
    emit(Tok::kString, std::move(val), start);
    return p;
  }

  const LexOptions opts_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& opts) {
  return Lexer(source, opts).run();
}

}  // namespace lancet::jinja
