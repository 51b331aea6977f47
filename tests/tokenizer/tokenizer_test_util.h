// Shared helpers for the tokenizer tests: the Llama 3 tokenizer loaded once, a seeded random
// text generator covering the hard cases of the pre-tokenizer regexes, and running the Python
// reference scripts (HF `tokenizers`, PyPI `gguf`) with JSON files in between.
#pragma once

#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace lancet::tok_test {

inline std::string llama3_tokenizer_path() {
  return testing::shared_dir() + "/models/llama3-tokenizer/tokenizer.json";
}

// Loaded once per test binary (loading parses a 9 MB JSON).
inline const Tokenizer& llama3() {
  static const Tokenizer tok = [] {
    auto t = Tokenizer::from_json_file(llama3_tokenizer_path());
    if (!t.ok()) {
      ADD_FAILURE() << t.status().to_string();
      return Tokenizer();
    }
    return std::move(t).value();
  }();
  return tok;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
}

inline void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  f << j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::strict);
}

// Runs tests/tokenizer/SCRIPT with args through the test Python; fails the test on error.
inline bool run_script(const std::string& script, const std::string& args) {
  const std::string cmd = testing::python() + " " + testing::source_dir() + "/tests/tokenizer/" +
                          script + " " + args;
  std::string output;
  const int rc = testing::run_command(cmd, &output);
  EXPECT_EQ(rc, 0) << cmd << "\n" << output;
  return rc == 0;
}

// Random valid UTF-8 text mixing the cases that separate regex engines and BPE orders: ASCII
// words, contractions (also with U+017F, which case-folds to 's'), digit runs, whitespace runs
// (tabs, CR/LF, NBSP, U+3000, U+0085, U+2028), punctuation runs, CJK, emoji with ZWJ and skin
// tones, combining marks, Arabic, Devanagari, Hangul, and special-token look-alikes.
inline std::string random_text(std::mt19937& rng, int pieces) {
  static const std::vector<std::string> kWords = {
      "the", "Hello", "WORLD", "token", "llama", "naïve", "café", "x", "aaaaaaaa", "snake_case",
      "camelCase", "über", "Ελληνικά", "Россия", "مرحبا", "नमस्ते", "한국어", "日本語", "你好",
      "大模型推理", "e\u0301", "a\u0308\u0301", "ﬁ", "ǅ", "ß", "İ", "\u017F"};
  static const std::vector<std::string> kSpaces = {
      " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00A0", "\u3000", "\u0085",
      "\u2028", " \t ", "\r", "\u200B", "\u2009"};
  static const std::vector<std::string> kPunct = {
      ".", ",", "!", "?", "...", "--", "==", "->", "(", ")", "{", "}", "[", "]", "\"", "'",
      "'s", "'S", "'ll", "'VE", "'d", "'\u017F", "#", "$", "€", "∑", "≤", "（", "）", "。",
      "、", "<|eot_id|>", "<|begin_of_text|>", "<|", "|>", "<s>", "_", "@", "\\", "/"};
  static const std::vector<std::string> kEmoji = {
      "👍", "👍🏽", "🦙", "👨\u200D👩\u200D👧", "🇺🇸", "❤️", "😀", "\U0001F9D1\u200D\U0001F4BB"};
  std::string out;
  std::uniform_int_distribution<int> kind(0, 99);
  for (int i = 0; i < pieces; ++i) {
    const int k = kind(rng);
    if (k < 30) {
      out += kWords[rng() % kWords.size()];
    } else if (k < 50) {
      out += kSpaces[rng() % kSpaces.size()];
    } else if (k < 62) {
      out += kPunct[rng() % kPunct.size()];
    } else if (k < 72) {
      const int digits = 1 + static_cast<int>(rng() % 7);
      for (int d = 0; d < digits; ++d) out += static_cast<char>('0' + rng() % 10);
      if (rng() % 8 == 0) out += "\u0663\u00B2\u2160";  // Arabic-Indic digit, superscript, Roman
    } else if (k < 80) {
      const int n = 1 + static_cast<int>(rng() % 6);
      for (int c = 0; c < n; ++c) utf8_append_codepoint(0x4E00 + rng() % 0x5000, &out);
    } else if (k < 86) {
      out += kEmoji[rng() % kEmoji.size()];
    } else if (k < 92) {
      // Any printable ASCII character.
      out += static_cast<char>(0x21 + rng() % 94);
    } else {
      // A random code point from blocks assigned long ago (Latin..Cyrillic, Arabic,
      // Devanagari, kana, CJK, Hangul, emoji, CJK Ext. B). Characters added in recent Unicode
      // versions are avoided: PCRE2 10.42 knows Unicode 15.0, HF's regex engine a newer one.
      static const std::vector<std::pair<uint32_t, uint32_t>> kRanges = {
          {0xA0, 0x52F},     {0x600, 0x6FF},     {0x900, 0x97F},   {0x3040, 0x30FF},
          {0x4E00, 0x9FFF},  {0xAC00, 0xD7A3},   {0x1F300, 0x1F5FF}, {0x20000, 0x2A6DF}};
      const auto& r = kRanges[rng() % kRanges.size()];
      const uint32_t cp = r.first + rng() % (r.second - r.first + 1);
      utf8_append_codepoint(cp, &out);
    }
  }
  return out;
}

}  // namespace lancet::tok_test
