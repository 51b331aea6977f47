// A document's text, page by page: PDFs through Poppler's C++ API (text in reading order),
// plain UTF-8 text files as one page. A corrupt, encrypted or empty document is a clear error.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace lancet::documents {

struct DocumentText {
  std::vector<std::string> pages;  // UTF-8, one entry per page
};

// By the first bytes: "%PDF" is a PDF, anything else must be UTF-8 text. `name` (a path, or
// what a request called the document) is what the errors say.
StatusOr<DocumentText> parse_document(std::string bytes, const std::string& name);
// parse_document of the file's bytes.
StatusOr<DocumentText> load_document(const std::string& path);

}  // namespace lancet::documents
