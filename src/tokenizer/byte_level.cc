// GPT-2 byte <-> unicode map; see byte_level.h.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace lancet {
namespace {

struct Tables {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // every mapped code point is < 512
  Tables() {
    to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the rest take 256, 257, ... in byte order.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_char[b] = keep ? static_cast<uint32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_level_char(uint8_t b) { return tables().to_char[b]; }

int byte_level_byte(uint32_t cp) { return cp < 512 ? tables().to_byte[cp] : -1; }

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) utf8_append_codepoint(byte_level_char(c), &out);
  return out;
}

bool byte_level_decode(std::string_view s, std::string* out) {
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    const int len = utf8_decode_one(s.data() + i, s.size() - i, &cp);
    if (len == 0) return false;
    const int b = byte_level_byte(cp);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
    i += static_cast<size_t>(len);
  }
  return true;
}

}  // namespace lancet
