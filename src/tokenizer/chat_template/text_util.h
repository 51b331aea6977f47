// Python-compatible text helpers for the template interpreter: UTF-8 code point handling,
// str.strip/split/splitlines whitespace rules, float repr, str repr and json.dumps escaping.
// Templates are written against Python semantics, so these must match CPython byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lancet::jinja {

// Byte offsets of each code point start in s, plus s.size() at the end. Invalid UTF-8 bytes
// count as one code point each.
std::vector<size_t> codepoint_offsets(std::string_view s);
size_t codepoint_count(std::string_view s);

bool is_py_space(uint32_t cp);  // str.isspace() / str.strip() whitespace
// Python str.strip(chars): chars == nullptr strips whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit); sep == nullptr splits on runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, long maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, long maxsplit);
std::vector<std::string> py_splitlines(std::string_view s);

// str.upper()/lower(); see text_util.cc for the scripts covered.
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
size_t word_count(std::string_view s);  // the |wordcount filter
std::string py_str_title(std::string_view s);   // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string jinja_title(std::string_view s);    // the |title filter (word starts after -, space, ( { [ <)
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, long count);

std::string py_float_repr(double d);       // repr(float): 1.0, 0.1, 1e+20, inf, nan
std::string py_str_repr(std::string_view s);  // repr(str): 'a', "it's"
std::string json_escape(std::string_view s);  // json.dumps(str, ensure_ascii=False), with quotes
std::string html_escape(std::string_view s);  // markupsafe.escape

}  // namespace lancet::jinja
