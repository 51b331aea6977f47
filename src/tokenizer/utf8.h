// UTF-8 helpers for the tokenizer: validation, lossy decoding with the Unicode "maximal subpart"
// rule (one U+FFFD per ill-formed subpart, as Rust's from_utf8_lossy and Python's
// errors='replace' do), a streaming variant that holds back an incomplete tail, and code point
// decoding. Ranges follow Unicode Table 3-7 (well-formed byte sequences).
#pragma once

#include "core/utf8_encode.h"  // utf8_append_codepoint

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lancet {

inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence starting at s[0] (1..4), or 0 when s[0..] is ill-formed or
// truncated. *cp receives the code point when the result is > 0.
int utf8_decode_one(const char* s, size_t n, uint32_t* cp);

bool utf8_is_valid(std::string_view s);

// Appends the lossy decoding of `bytes` to *out and returns how many bytes were consumed.
// With final=false, a trailing sequence that is incomplete but could still become valid is not
// consumed (the caller keeps it for later); with final=true everything is consumed.
size_t utf8_append_lossy(std::string_view bytes, bool final, std::string* out);

// Lossy decoding of a whole buffer.
std::string utf8_lossy(std::string_view bytes);

// Unicode White_Space property (what Rust's char::is_whitespace tests).
bool unicode_is_whitespace(uint32_t cp);

}  // namespace lancet
