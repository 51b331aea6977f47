// Content-rule engine throughput: a rule set of a few hundred keywords (English and Chinese)
// and tens of regexes over a mixed English/Chinese corpus, scanned whole (prompts) and in
// token-sized chunks (streamed output), in MB/s; then the cost of one typical request (a 2 KB
// prompt plus a 1 KB output streamed 4 bytes at a time), mean and p99, with text that none of the
// regexes can match (the corpus) and with text holding their literals.
//   cmake --build build --target bench_guard && build/bench_guard
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "guard/guard_scanner.h"

namespace {

using lancet::guard::GuardScanner;
using Clock = std::chrono::steady_clock;

const char* kSyllables[] = {"ka", "lo", "mi", "ter", "on", "ash", "ri", "ve", "nu", "pol", "st", "ex"};
const char* kHan[] = {"的", "是", "不", "了", "人", "我", "在", "有", "他", "这", "中", "大", "来", "上", "国"};

std::string word(std::mt19937& rng) {
  std::string w;
  for (int i = 0, n = 2 + static_cast<int>(rng() % 3); i < n; ++i) w += kSyllables[rng() % std::size(kSyllables)];
  return w;
}

std::string rules_yaml(std::mt19937& rng, int keywords, int regexes) {
  std::string y = "rules:\n";
  for (int r = 0; r < 10; ++r) {
    y += "  - id: kw" + std::to_string(r) + "\n    action: " + (r % 2 ? "flag" : "block") + "\n    keywords: [";
    for (int k = 0; k < keywords / 10; ++k) {
      std::string kw = word(rng) + word(rng);  // rare in the corpus: words there are shorter
      if (k % 4 == 0) kw = std::string(kHan[rng() % 15]) + kHan[rng() % 15] + kHan[rng() % 15] + kHan[rng() % 15];
      y += (k ? ", '" : "'") + kw + "'";
    }
    y += "]\n";
  }
  const char* shapes[] = {"\\b\\d{3}-\\d{4}\\b", "api[_-]?key\\s*[:=]\\s*\\w{8}", "(?:ka|lo)\\d{2,4}zz", "\\bpass(?:word)?\\s*[:=]\\s*\\S{6}"};
  for (int r = 0; r < regexes; ++r)
    y += "  - id: re" + std::to_string(r) + "\n    action: flag\n    regexes: ['" + shapes[r % 4] +
         std::to_string(r) + "']\n";
  y += "allow:\n  - id: ok\n    keywords: [kalomi terons]\n";
  return y;
}

std::string corpus(std::mt19937& rng, size_t bytes) {
  std::string t;
  while (t.size() < bytes) {
    if (rng() % 5 == 0) {
      for (int i = 0; i < 6; ++i) t += kHan[rng() % 15];
    } else {
      t += word(rng);
    }
    t += rng() % 9 == 0 ? ". " : " ";
  }
  return t;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main() {
  std::mt19937 rng(1);
  const int kKeywords = 300, kRegexes = 30;
  auto spec = lancet::guard::parse_rules_yaml(rules_yaml(rng, kKeywords, kRegexes), "bench");
  if (!spec.ok()) return std::fprintf(stderr, "%s\n", spec.status().message().c_str()), 1;
  const auto t_compile = Clock::now();
  auto rules = lancet::guard::GuardRules::compile(*spec);
  if (!rules.ok()) return std::fprintf(stderr, "%s\n", rules.status().message().c_str()), 1;
  const double compile_ms = seconds_since(t_compile) * 1e3;
  const auto& g = **rules;
  size_t jit = 0;
  for (size_t i = 0; i < g.num_regexes(); ++i) jit += g.regex(i).jit_compiled();
  std::printf("regexes JIT-compiled: %zu of %zu\n", jit, g.num_regexes());
  std::printf("rules: %zu keywords (%zu automaton states), %zu regexes, compiled in %.2f ms\n",
              g.keywords().num_keywords(), g.keywords().num_states(), g.num_regexes(), compile_ms);

  const std::string text = corpus(rng, 8u << 20);
  const double mb = static_cast<double>(text.size()) / 1e6;
  size_t hits = 0;
  auto t0 = Clock::now();
  hits += lancet::guard::scan_text(g, text).hits.size();
  const double whole_s = seconds_since(t0);
  t0 = Clock::now();
  {
    GuardScanner s(&g);
    for (size_t i = 0; i < text.size(); i += 4) s.feed(std::string_view(text).substr(i, 4));
    s.finish();
    hits += s.hits().size();
  }
  const double stream_s = seconds_since(t0);
  // Keywords alone: the automaton's own speed.
  lancet::guard::KeywordAutomaton::State st;
  std::vector<lancet::guard::KeywordAutomaton::Match> m;
  t0 = Clock::now();
  g.keywords().scan(text, &st, &m);
  const double kw_s = seconds_since(t0);
  std::printf("corpus %.1f MB: whole text %.0f MB/s, streamed in 4-byte chunks %.0f MB/s, keyword automaton alone "
              "%.0f MB/s (%zu hits)\n",
              mb, mb / whole_s, mb / stream_s, mb / kw_s, hits + m.size());

  // One request: a 2 KB prompt scanned whole, a 1 KB output streamed 4 bytes per token; then the
  // same with text that holds the regexes' literals (so their searches run, and some match).
  const std::string with_literals = " call 555-1234, api_key = abcdefgh1 and password: secret3 ";
  for (bool literals : {false, true}) {
    std::vector<double> per_req;
    for (int r = 0; r < 2000; ++r) {
      std::string prompt = corpus(rng, 2048), output = corpus(rng, 1024);
      if (literals) {
        prompt.insert(prompt.find(' ', rng() % prompt.size()) + 1, with_literals);
        output.insert(output.find(' ', rng() % output.size()) + 1, with_literals);
      }
      const auto t = Clock::now();
      hits += lancet::guard::scan_text(g, prompt).hits.size();
      GuardScanner s(&g);
      for (size_t i = 0; i < output.size(); i += 4) s.feed(std::string_view(output).substr(i, 4));
      s.finish();
      hits += s.hits().size();
      per_req.push_back(seconds_since(t) * 1e6);
    }
    std::sort(per_req.begin(), per_req.end());
    double sum = 0;
    for (double v : per_req) sum += v;
    std::printf("per request (2 KB prompt + 1 KB streamed output%s): mean %.1f us, p99 %.1f us, max %.1f us\n",
                literals ? ", both holding the regexes' literals" : "", sum / static_cast<double>(per_req.size()),
                per_req[per_req.size() * 99 / 100], per_req.back());
  }
  return hits == 0 ? 1 : 0;
}
