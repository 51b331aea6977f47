// UTF-8 helpers; see utf8.h.
#include "tokenizer/utf8.h"

#include <cstring>

namespace lancet {
namespace {

// Allowed range of the second byte for each lead byte (Table 3-7); later bytes are 80..BF.
struct LeadInfo {
  int len;  // 0 = never a valid lead byte
  uint8_t lo, hi;
};

inline LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Examines the sequence at s: returns its length when well-formed (>0), or -k where k >= 1 is
// the length of the maximal ill-formed subpart, or 0 when the input ends inside a sequence that
// is still a valid prefix.
inline int scan(const uint8_t* s, size_t n) {
  const LeadInfo li = lead_info(s[0]);
  if (li.len == 1) return 1;
  if (li.len == 0) return -1;
  for (int k = 1; k < li.len; ++k) {
    if (static_cast<size_t>(k) >= n) return 0;
    const uint8_t lo = k == 1 ? li.lo : 0x80, hi = k == 1 ? li.hi : 0xBF;
    if (s[k] < lo || s[k] > hi) return -k;
  }
  return li.len;
}

}  // namespace

int utf8_decode_one(const char* s, size_t n, uint32_t* cp) {
  if (n == 0) return 0;
  const auto* u = reinterpret_cast<const uint8_t*>(s);
  const int len = scan(u, n);
  if (len <= 0) return 0;
  uint32_t c;
  switch (len) {
    case 1: c = u[0]; break;
    case 2: c = ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu); break;
    case 3: c = ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu); break;
    default:
      c = ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) | ((u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu);
  }
  *cp = c;
  return len;
}

bool utf8_is_valid(std::string_view s) {
  const auto* u = reinterpret_cast<const uint8_t*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t v;
      std::memcpy(&v, u + i, 8);
      if (v & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (u[i] < 0x80) { ++i; continue; }
    const int len = scan(u + i, n - i);
    if (len <= 0) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

size_t utf8_append_lossy(std::string_view bytes, bool final, std::string* out) {
  const auto* u = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0, run = 0;  // [run, i) is valid text not yet copied
  while (i < n) {
    if (u[i] < 0x80) { ++i; continue; }
    const int len = scan(u + i, n - i);
    if (len > 0) { i += static_cast<size_t>(len); continue; }
    out->append(bytes.data() + run, i - run);
    if (len == 0) {  // truncated at the end of the input
      if (!final) return i;
      out->append(kUtf8Replacement);
      return n;
    }
    out->append(kUtf8Replacement);
    i += static_cast<size_t>(-len);
    run = i;
  }
  out->append(bytes.data() + run, n - run);
  return n;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  utf8_append_lossy(bytes, /*final=*/true, &out);
  return out;
}

bool unicode_is_whitespace(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace lancet
