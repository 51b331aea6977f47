// Needle cases: parsing the length and depth lists, passphrases, fitting the filler to a
// token budget, and scoring answers.
#include "eval/needle_haystack.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>
#include <sstream>

namespace lancet {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* const kIntro = "Read the following text carefully. A question about it follows at the end.\n\n";

// The user message: instructions, the filler with the needle after `needle_at` sentences, the
// question. Sentences cycle through the prose.
std::string compose(int64_t n_sentences, int64_t needle_at, const std::string& needle) {
  const auto& filler = needle_filler_sentences();
  std::string text = kIntro;
  for (int64_t i = 0; i <= n_sentences; ++i) {
    if (i == needle_at) {
      text += needle;
      text += ' ';
    }
    if (i == n_sentences) break;
    text += filler[static_cast<size_t>(i) % filler.size()];
    // A paragraph break every eight sentences keeps the text looking like prose.
    text += (i % 8 == 7) ? "\n\n" : " ";
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n')) text.pop_back();
  text += "\n\n";
  text += needle_question();
  return text;
}

int64_t needle_index(int64_t n_sentences, double depth) {
  return std::clamp<int64_t>(std::llround(depth * static_cast<double>(n_sentences)), 0, n_sentences);
}

}  // namespace

StatusOr<std::vector<int64_t>> parse_needle_lengths(const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text)) {
    std::string num = item;
    int64_t mult = 1;
    if (!num.empty() && (num.back() == 'k' || num.back() == 'K')) {
      mult = 1024;
      num.pop_back();
    }
    try {
      size_t used = 0;
      const long long v = std::stoll(num, &used);
      if (used != num.size() || v <= 0 || v > (int64_t{1} << 30) / mult) throw std::invalid_argument(item);
      out.push_back(v * mult);
    } catch (const std::exception&) {
      return InvalidArgument("--lengths: '" + item + "' is not a positive token count (e.g. 4096 or 8k)");
    }
  }
  if (out.empty()) return InvalidArgument("--lengths is empty");
  return out;
}

StatusOr<std::vector<double>> parse_needle_depths(const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : split_list(text)) {
    try {
      size_t used = 0;
      const double v = std::stod(item, &used);
      if (used != item.size() || !(v >= 0.0 && v <= 1.0)) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgument("--depths: '" + item + "' is not a fraction in [0, 1]");
    }
  }
  if (out.empty()) return InvalidArgument("--depths is empty");
  return out;
}

std::string needle_passphrase(uint64_t seed, int64_t index) {
  static const char* const kWords[] = {"amber",  "cobalt", "falcon", "granite", "harbor", "juniper", "lantern",
                                       "marble", "nectar", "orchid", "pepper",  "quartz", "saffron", "timber",
                                       "velvet", "walnut", "copper", "meadow",  "raven",  "silver"};
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(index) + 1);
  const char* word = kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
  const int number = 1000 + static_cast<int>(rng() % 9000);
  return std::string(word) + "-" + std::to_string(number);
}

std::string needle_sentence(const std::string& passphrase) {
  return "The secret passphrase is " + passphrase + ".";
}

const std::string& needle_question() {
  static const std::string kQuestion =
      "Question: What is the secret passphrase mentioned in the text? Answer with the passphrase only.";
  return kQuestion;
}

StatusOr<Haystack> build_haystack(const HaystackSpec& spec, const PromptTokenCounter& count) {
  const std::string needle = needle_sentence(spec.passphrase);
  Haystack h;
  ASSIGN_OR_RETURN(const int64_t bare, count(compose(0, 0, needle)));
  if (bare > spec.max_prompt_tokens)
    return InvalidArgument("needle: the instructions and question alone take " + std::to_string(bare) +
                           " prompt tokens, more than the " + std::to_string(spec.max_prompt_tokens) + " available");
  // Tokens per sentence, measured on one pass through the prose (sentences tokenize almost
  // independently: they are separated by spaces), give the first guess; exact counts of the
  // whole prompt then shrink it until it fits.
  const auto& filler = needle_filler_sentences();
  const int64_t nf = static_cast<int64_t>(filler.size());
  ASSIGN_OR_RETURN(const int64_t one_pass, count(compose(nf, 0, needle)));
  const double per_sentence = std::max(1.0, static_cast<double>(one_pass - bare) / static_cast<double>(nf));
  const int64_t budget = spec.max_prompt_tokens - bare;
  int64_t n = static_cast<int64_t>(std::ceil(static_cast<double>(budget) / per_sentence)) + 1;
  int64_t tokens = 0;
  for (int iter = 0;; ++iter) {
    if (iter > 64) return Internal("needle: the haystack size did not converge");
    ASSIGN_OR_RETURN(tokens, count(compose(n, needle_index(n, spec.depth), needle)));
    if (tokens <= spec.max_prompt_tokens || n == 0) break;
    const double over = static_cast<double>(tokens - spec.max_prompt_tokens);
    n = std::max<int64_t>(0, n - std::max<int64_t>(1, static_cast<int64_t>(std::ceil(over / per_sentence))));
  }
  h.filler_sentences = n;
  h.needle_sentence_index = needle_index(n, spec.depth);
  h.user_content = compose(n, h.needle_sentence_index, needle);
  h.prompt_tokens = tokens;
  return h;
}

NeedleScore score_needle_answer(const std::string& answer, const std::string& passphrase) {
  NeedleScore s;
  const std::string a = lower(answer), p = lower(passphrase);
  s.found = a.find(p) != std::string::npos;
  size_t b = 0, e = a.size();
  auto strip = [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) || c == '"' || c == '\'' || c == '`' || c == '*' || c == '.';
  };
  while (b < e && strip(a[b])) ++b;
  while (e > b && strip(a[e - 1])) --e;
  s.exact = a.compare(b, e - b, p) == 0;
  return s;
}

}  // namespace lancet
