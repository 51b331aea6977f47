// Whole-file reads for the small text files next to a checkpoint (config.json, index.json,
// tokenizer_config.json). The size cap keeps a hostile or mistaken path from being slurped.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace lancet {

constexpr uint64_t kMaxTextFileBytes = 256ull << 20;

// NotFound when the file does not exist, IoError when it cannot be read, OutOfRange past max.
StatusOr<std::string> read_text_file(const std::string& path,
                                     uint64_t max_bytes = kMaxTextFileBytes);

// A prompt-file line with each two-character "\\n" turned into a newline (prompt files keep one
// prompt per line, so code and dialogue spell their line breaks that way).
std::string unescape_newlines(const std::string& line);

}  // namespace lancet
