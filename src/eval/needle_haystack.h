// Needle-in-a-haystack long-context test: a fact ("The secret passphrase is amber-4821.") is
// placed at a chosen depth of filler prose (needle_filler.cc, written for this project and
// repeated to length), the model is asked for it through the chat template, and its answer is
// scored. This file builds the cases and scores answers; `lancet eval-needle`
// (src/cli/eval_needle_cmd.cc) runs them on an engine and reports.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace lancet {

// The filler sentences, in order (each ends with its punctuation, no leading space).
const std::vector<std::string>& needle_filler_sentences();

// "8k,32k,128k" -> {8192, 32768, 131072} ("k" = 1024, plain numbers are tokens). Sorted as
// given; every entry must be positive.
StatusOr<std::vector<int64_t>> parse_needle_lengths(const std::string& text);
// "0,0.25,0.5,0.75,1" -> fractions in [0, 1].
StatusOr<std::vector<double>> parse_needle_depths(const std::string& text);

// The passphrase of case `index` for a seed: "<word>-<4 digits>", reproducible.
std::string needle_passphrase(uint64_t seed, int64_t index);
std::string needle_sentence(const std::string& passphrase);  // "The secret passphrase is X."
const std::string& needle_question();

// Counts the prompt tokens of a user message with this content, rendered through the chat
// template exactly as the run will send it.
using PromptTokenCounter = std::function<StatusOr<int64_t>(const std::string& user_content)>;

struct HaystackSpec {
  int64_t max_prompt_tokens = 0;  // the prompt (template included) must not exceed this
  double depth = 0.5;             // 0 = the needle opens the text, 1 = it closes it
  std::string passphrase;
};

struct Haystack {
  std::string user_content;       // instructions + filler with the needle + question
  int64_t prompt_tokens = 0;      // exact, through the counter
  int64_t filler_sentences = 0;
  int64_t needle_sentence_index = 0;  // sentences of filler before the needle
};

// Fills the context with as many filler sentences (cycling through the prose) as fit under
// max_prompt_tokens, the needle at `depth` of them. Error when even the bare instructions,
// needle and question do not fit.
StatusOr<Haystack> build_haystack(const HaystackSpec& spec, const PromptTokenCounter& count);

struct NeedleScore {
  bool exact = false;  // the answer, trimmed of spaces, quotes and final punctuation, is the passphrase
  bool found = false;  // the answer contains the passphrase (case-insensitive)
};
NeedleScore score_needle_answer(const std::string& answer, const std::string& passphrase);

}  // namespace lancet
