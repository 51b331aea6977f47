// RegexMatcher over PCRE2 (8-bit): compile + JIT, match data per thread.
#include "guard/regex_matcher.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace lancet::guard {

struct RegexMatcher::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Match data sized for one pair (the whole match), one per thread: searches run on many
// request threads at once over shared compiled patterns.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder h;
  return h.md;
}

}  // namespace

StatusOr<std::unique_ptr<RegexMatcher>> RegexMatcher::compile(const std::string& pattern, bool case_sensitive) {
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (!case_sensitive) options |= PCRE2_CASELESS;
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err,
                                   &err_offset, nullptr);
  if (!code)
    return InvalidArgument("bad regex '" + pattern + "' at offset " + std::to_string(err_offset) + ": " +
                                   pcre2_message(err));
  std::unique_ptr<RegexMatcher> m(new RegexMatcher());
  m->impl_ = std::make_unique<Impl>();
  m->impl_->code = code;
  m->impl_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD) == 0;
  return m;
}

bool RegexMatcher::has_backreferences() const {
  uint32_t n = 0;
  pcre2_pattern_info(impl_->code, PCRE2_INFO_BACKREFMAX, &n);
  return n > 0;
}

bool RegexMatcher::jit_compiled() const { return impl_->jit; }

RegexMatcher::~RegexMatcher() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

RegexMatcher::Found RegexMatcher::search(std::string_view subject, size_t from, bool partial) const {
  Found f;
  if (from > subject.size()) return f;
  pcre2_match_data* md = thread_match_data();
  const uint32_t options = partial ? PCRE2_PARTIAL_HARD : 0;
  const int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), from,
                             options, md, nullptr);
  if (rc < 0 && rc != PCRE2_ERROR_PARTIAL) return f;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  f.result = rc == PCRE2_ERROR_PARTIAL ? Result::kPartial : Result::kMatch;
  f.start = ov[0];
  f.end = rc == PCRE2_ERROR_PARTIAL ? subject.size() : ov[1];
  return f;
}

}  // namespace lancet::guard
