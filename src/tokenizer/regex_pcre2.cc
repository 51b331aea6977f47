// PCRE2 wrapper; see regex_pcre2.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_pcre2.h"

#include <pcre2.h>

namespace lancet {
namespace {

// Per-thread match state shared by all patterns: match data sized for one pair (we only need
// the whole match) and a JIT stack large enough for long whitespace or letter runs.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    if (context) pcre2_match_context_free(context);
    if (stack) pcre2_jit_stack_free(stack);
    if (data) pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string translate_onig_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      ++i;
      if (d == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (d == 'S') {
        // Inside a class \S cannot be rewritten as a union; keep it (no tokenizer uses it).
        out += in_class ? "\\S" : "[^\\s\\x{85}]";
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

StatusOr<std::shared_ptr<const Pcre2Regex>> Pcre2Regex::compile(std::string_view pattern) {
  const std::string translated = translate_onig_pattern(pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                   translated.size(), PCRE2_UTF | PCRE2_UCP, &err, &err_off,
                                   nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return InvalidArgument("pre-tokenizer regex does not compile at offset " +
                           std::to_string(err_off) + ": " + reinterpret_cast<char*>(msg) +
                           " (pattern: " + std::string(pattern) + ")");
  }
  std::shared_ptr<Pcre2Regex> re(new Pcre2Regex());
  re->code_ = code;
  re->pattern_ = std::string(pattern);
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const Pcre2Regex>(std::move(re));
}

Pcre2Regex::~Pcre2Regex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

bool Pcre2Regex::find(std::string_view subject, size_t start, size_t* begin, size_t* end) const {
  ThreadMatchState& st = thread_state();
  auto* code = static_cast<const pcre2_code*>(code_);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = jit_ ? pcre2_jit_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, st.data,
                                  st.context)
                : -1;
  if (!jit_ || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, st.data,
                     nullptr);
  }
  if (rc < 0) return false;  // PCRE2_ERROR_NOMATCH (or a limit on absurd input)
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace lancet
