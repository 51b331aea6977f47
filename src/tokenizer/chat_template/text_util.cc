// Python-compatible text helpers (see text_util.h). Case mapping is ASCII-only: chat templates
// apply it to role names and keywords, never to arbitrary user text.
#include "tokenizer/chat_template/text_util.h"
#include "core/utf8_encode.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace lancet::jinja {

namespace {

// Decodes the code point at s[i]; sets *len to its byte length (1 for an invalid byte).
uint32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    *len = 1;
    return b0;
  }
  uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1f) : n == 3 ? (b0 & 0x0f) : (b0 & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b >> 6) != 2) {
      *len = 1;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3f);
  }
  *len = static_cast<size_t>(n);
  return cp;
}

bool is_line_break(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d ||
         cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

bool contains_cp(const std::string& chars, uint32_t cp) {
  for (size_t i = 0; i < chars.size();) {
    size_t len;
    if (decode_at(chars, i, &len) == cp) return true;
    i += len;
  }
  return false;
}

// Simple case mapping for ASCII, Latin-1, Greek and Cyrillic: enough for the names and
// keywords templates change case on. Other scripts pass through unchanged.
uint32_t cp_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7) || (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) ||
      (c >= 0x430 && c <= 0x44f))
    return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}
uint32_t cp_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7) || (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) ||
      (c >= 0x410 && c <= 0x42f))
    return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}
bool cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }


// Rewrites s code point by code point; fn(cp, index, prev_cp) returns the new code point.
template <typename Fn>
std::string map_cps(std::string_view s, Fn fn) {
  std::string out;
  out.reserve(s.size());
  uint32_t prev = 0;
  size_t idx = 0;
  for (size_t i = 0; i < s.size(); ++idx) {
    size_t len;
    uint32_t cp = decode_at(s, i, &len);
    bool valid = len > 1 || cp < 0x80;
    if (valid) utf8_append_codepoint(fn(cp, idx, prev), &out);
    else out += s[i];
    prev = cp;
    i += len;
  }
  return out;
}

}  // namespace

std::vector<size_t> codepoint_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    size_t len;
    decode_at(s, i, &len);
    i += len;
  }
  out.push_back(s.size());
  return out;
}

size_t codepoint_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    size_t len;
    decode_at(s, i, &len);
    i += len;
  }
  return n;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  auto strip_cp = [&](uint32_t cp) { return chars ? contains_cp(*chars, cp) : is_py_space(cp); };
  std::vector<size_t> off = codepoint_offsets(s);
  size_t n = off.size() - 1, b = 0, e = n;
  size_t len;
  if (left) {
    while (b < n && strip_cp(decode_at(s, off[b], &len))) ++b;
  }
  if (right) {
    while (e > b && strip_cp(decode_at(s, off[e - 1], &len))) --e;
  }
  return std::string(s.substr(off[b], off[e] - off[b]));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
      size_t f = s.find(*sep, pos);
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  size_t i = 0, len;
  auto skip_ws = [&] {
    while (i < s.size() && is_py_space(decode_at(s, i, &len))) i += len;
  };
  skip_ws();
  while (i < s.size()) {
    if (maxsplit >= 0 && static_cast<long>(out.size()) >= maxsplit) {
      out.emplace_back(s.substr(i));  // the remainder is kept verbatim, trailing spaces too
      return out;
    }
    size_t start = i;
    while (i < s.size() && !is_py_space(decode_at(s, i, &len))) i += len;
    out.emplace_back(s.substr(start, i - start));
    skip_ws();
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, long maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, -1);
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (static_cast<long>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::vector<std::string> all = py_split(s, nullptr, -1);
    long keep = static_cast<long>(all.size()) - maxsplit;
    if (keep <= 1) return all;
    // Everything before the last maxsplit words stays one piece, as CPython does.
    std::string_view rest = s;
    for (long k = 0; k < maxsplit; ++k) {
      std::string stripped = py_strip(rest, nullptr, false, true);
      size_t cut = stripped.size();
      size_t len;
      auto offs = codepoint_offsets(stripped);
      size_t ci = offs.size() - 1;
      while (ci > 0 && !is_py_space(decode_at(stripped, offs[ci - 1], &len))) --ci;
      cut = offs[ci];
      out.push_back(stripped.substr(cut));
      rest = rest.substr(0, cut);
    }
    out.push_back(py_strip(rest, nullptr, false, true));
  }
  return std::vector<std::string>(out.rbegin(), out.rend());
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0, i = 0, len;
  while (i < s.size()) {
    uint32_t cp = decode_at(s, i, &len);
    if (is_line_break(cp)) {
      out.emplace_back(s.substr(start, i - start));
      i += len;
      if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
      start = i;
    } else {
      i += len;
    }
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string py_upper(std::string_view s) {
  return map_cps(s, [](uint32_t c, size_t, uint32_t) { return cp_upper(c); });
}

std::string py_lower(std::string_view s) {
  return map_cps(s, [](uint32_t c, size_t, uint32_t) { return cp_lower(c); });
}

std::string py_str_title(std::string_view s) {
  bool prev_cased = false;
  return map_cps(s, [&](uint32_t c, size_t, uint32_t) {
    uint32_t r = prev_cased ? cp_lower(c) : cp_upper(c);
    prev_cased = cp_cased(c);
    return r;
  });
}

std::string py_capitalize(std::string_view s) {
  return map_cps(s, [](uint32_t c, size_t i, uint32_t) { return i == 0 ? cp_upper(c) : cp_lower(c); });
}

std::string jinja_title(std::string_view s) {
  bool word_start = true;
  return map_cps(s, [&](uint32_t c, size_t, uint32_t) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
    if (sep) {
      word_start = true;
      return c;
    }
    uint32_t r = word_start ? cp_upper(c) : cp_lower(c);
    word_start = false;
    return r;
  });
}

size_t word_count(std::string_view s) {
  // Jinja counts regex \w+ runs; letters, digits, '_' and any non-ASCII character.
  size_t n = 0;
  bool in_word = false;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    bool w = c >= 0x80 || std::isalnum(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return n;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       long count) {
  std::string out;
  if (old.empty()) {
    // Python inserts repl between every code point and at both ends.
    std::vector<size_t> off = codepoint_offsets(s);
    long done = 0;
    for (size_t k = 0; k + 1 < off.size(); ++k) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out += s.substr(off[k], off[k + 1] - off[k]);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  long done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string_view::npos) break;
    out += s.substr(pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then CPython's layout: fixed for 1e-4 <= |d| < 1e16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::atoi(sci.c_str() + epos + 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1);
        out += '.';
        out.append(digits, exp + 1, std::string::npos);
      }
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  if (neg) out.insert(out.begin(), '-');
  return out;
}

std::string py_str_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  out += q;
  return out;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

}  // namespace lancet::jinja
