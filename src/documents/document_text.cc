// Document text (document_text.h): Poppler for PDFs, the file itself for text.
#include "documents/document_text.h"

#include <fstream>
#include <memory>
#include <sstream>

#include <poppler-document.h>
#include <poppler-global.h>
#include <poppler-page.h>

namespace lancet::documents {
namespace {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0 || i + static_cast<size_t>(n) >= s.size() + (n == 0 ? 1 : 0)) return false;
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xC0) != 0x80) return false;
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

// Poppler prints its warnings for malformed files to stderr unless told otherwise.
void quiet_poppler(const std::string&, void*) {}

StatusOr<DocumentText> load_pdf(const std::string& bytes, const std::string& path) {
  poppler::set_debug_error_function(quiet_poppler, nullptr);
  std::unique_ptr<poppler::document> doc(poppler::document::load_from_raw_data(bytes.data(), static_cast<int>(bytes.size())));
  if (!doc) return InvalidArgument(path + ": not a readable PDF (corrupt or truncated)");
  if (doc->is_locked()) return InvalidArgument(path + ": the PDF is encrypted");
  DocumentText out;
  for (int i = 0; i < doc->pages(); ++i) {
    std::unique_ptr<poppler::page> page(doc->create_page(i));
    if (!page) return InvalidArgument(path + ": page " + std::to_string(i + 1) + " cannot be read");
    const poppler::byte_array utf8 = page->text().to_utf8();
    out.pages.emplace_back(utf8.begin(), utf8.end());
  }
  if (out.pages.empty()) return InvalidArgument(path + ": the PDF has no pages");
  return out;
}

}  // namespace

StatusOr<DocumentText> parse_document(std::string bytes, const std::string& name) {
  if (bytes.rfind("%PDF", 0) == 0) return load_pdf(bytes, name);
  if (!valid_utf8(bytes)) return InvalidArgument(name + ": neither a PDF nor UTF-8 text");
  DocumentText out;
  out.pages.push_back(std::move(bytes));
  return out;
}

StatusOr<DocumentText> load_document(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return parse_document(s.str(), path);
}

}  // namespace lancet::documents
