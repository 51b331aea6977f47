// The GPT-2 byte <-> unicode map used by byte-level BPE vocabularies (Llama 3, SmolLM2, GPT-2):
// every byte is shown as one printable code point, so vocab and merge strings are UTF-8 text
// whose characters stand for single bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lancet {

// Code point that stands for byte b.
uint32_t byte_level_char(uint8_t b);

// Byte that code point cp stands for, or -1 when cp is not in the map.
int byte_level_byte(uint32_t cp);

// Raw bytes -> byte-level string ("Hello world" -> "HelloĠworld").
std::string byte_level_encode(std::string_view bytes);

// Byte-level string -> raw bytes. Returns false (leaving *out unspecified) when s is not valid
// UTF-8 or has a character outside the map.
bool byte_level_decode(std::string_view s, std::string* out);

}  // namespace lancet
