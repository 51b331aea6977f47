// read_text_file: stat, check the size, then one read.
#include "io/text_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace lancet {

StatusOr<std::string> read_text_file(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IoError("cannot stat " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return IoError(path + " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return OutOfRange(path + " is " + std::to_string(st.st_size) + " bytes, over the limit of " +
                      std::to_string(max_bytes));
  }
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return IoError("cannot open " + path + ": " + std::strerror(errno));
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t n = out.empty() ? 0 : std::fread(out.data(), 1, out.size(), f);
  bool err = std::ferror(f) != 0;
  std::fclose(f);
  if (err || n != out.size()) return IoError("cannot read " + path);
  return out;
}

std::string unescape_newlines(const std::string& line) {
  std::string p;
  p.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
      p += '\n';
      ++i;
    } else {
      p += line[i];
    }
  }
  return p;
}

}  // namespace lancet
