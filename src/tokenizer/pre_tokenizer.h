// Pre-tokenizer: splits text into pieces that BPE encodes independently. A pipeline of regex
// splits with HF "Isolated" behaviour (each match is a piece, and so is each stretch between
// matches); later steps split the pieces of earlier ones, so a lookahead such as \s+(?!\S) sees
// the end of the piece as the end of the text, as in HF's Sequence pre-tokenizer.
//   Llama 3:  Split(llama3 regex) -> ByteLevel(use_regex=false)
//   SmolLM2:  Digits(individual) -> ByteLevel(use_regex=true, i.e. the GPT-2 regex)
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "tokenizer/regex_pcre2.h"

namespace lancet {

inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The regex of HF's ByteLevel pre-tokenizer with use_regex=true (GPT-2).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// HF Digits(individual_digits=true) isolates every numeric character; false keeps runs.
inline constexpr std::string_view kDigitsIndividualPattern = R"(\p{N})";
inline constexpr std::string_view kDigitsContiguousPattern = R"(\p{N}+)";

class PreTokenizer {
 public:
  void add_split(std::shared_ptr<const Pcre2Regex> regex) { steps_.push_back(std::move(regex)); }
  size_t num_steps() const { return steps_.size(); }
  const Pcre2Regex& step(size_t i) const { return *steps_[i]; }

  // Calls f(piece) for every piece of `text` (valid UTF-8): views into text, in order, non-empty,
  // covering all of it. Pieces are produced as matches are found, nothing is buffered.
  template <typename F>
  void for_each_piece(std::string_view text, F&& f) const {
    if (text.empty()) return;
    if (steps_.empty()) {
      f(text);
      return;
    }
    visit(0, text, f);
  }

  // Appends the pieces of `text` to *pieces.
  void split(std::string_view text, std::vector<std::string_view>* pieces) const {
    for_each_piece(text, [&](std::string_view p) { pieces->push_back(p); });
  }

  // One HF Split(Isolated) step: f(piece) for each match and each stretch between matches.
  template <typename F>
  static void split_isolated(const Pcre2Regex& re, std::string_view text, F&& f) {
    size_t piece_start = 0, search = 0, b = 0, e = 0;
    while (search < text.size() && re.find(text, search, &b, &e)) {
      if (e == b) {
        // An empty match splits nothing (HF drops empty pieces); search one character on.
        search = b + 1;
        while (search < text.size() &&
               (static_cast<unsigned char>(text[search]) & 0xC0) == 0x80) {
          ++search;
        }
        continue;
      }
      if (b > piece_start) f(text.substr(piece_start, b - piece_start));
      f(text.substr(b, e - b));
      piece_start = search = e;
    }
    if (piece_start < text.size()) f(text.substr(piece_start));
  }

 private:
  template <typename F>
  void visit(size_t step, std::string_view text, F& f) const {
    if (step + 1 == steps_.size()) {
      split_isolated(*steps_[step], text, f);
    } else {
      split_isolated(*steps_[step], text, [&](std::string_view p) { visit(step + 1, p, f); });
    }
  }

  std::vector<std::shared_ptr<const Pcre2Regex>> steps_;
};

}  // namespace lancet
