// A minimal PDF writer for the document tests: one Helvetica text line per entry, one page per
// list, with a correct cross-reference table (what `lancet doc` reads through Poppler).
#pragma once

#include <string>
#include <vector>

namespace lancet::testing {

inline std::string make_pdf(const std::vector<std::vector<std::string>>& pages) {
  std::vector<std::string> objs = {"<< /Type /Catalog /Pages 2 0 R >>", "",
                                   "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"};
  std::string kids;
  for (size_t i = 0; i < pages.size(); ++i) {
    kids += (i ? " " : "") + std::to_string(4 + 2 * i) + " 0 R";
    std::string content = "BT /F1 12 Tf 72 720 Td 14 TL";
    for (const std::string& line : pages[i]) {
      std::string esc;
      for (char c : line) {
        if (c == '(' || c == ')' || c == '\\') esc += '\\';
        esc += c;
      }
      content += " (" + esc + ") '";
    }
    content += " ET";
    objs.push_back("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                   "/Contents " + std::to_string(5 + 2 * i) + " 0 R >>");
    objs.push_back("<< /Length " + std::to_string(content.size()) + " >>\nstream\n" + content + "\nendstream");
  }
  objs[1] = "<< /Type /Pages /Kids [" + kids + "] /Count " + std::to_string(pages.size()) + " >>";
  std::string out = "%PDF-1.4\n";
  std::vector<size_t> offsets;
  for (size_t n = 0; n < objs.size(); ++n) {
    offsets.push_back(out.size());
    out += std::to_string(n + 1) + " 0 obj\n" + objs[n] + "\nendobj\n";
  }
  const size_t xref = out.size();
  out += "xref\n0 " + std::to_string(objs.size() + 1) + "\n0000000000 65535 f \n";
  for (size_t o : offsets) {
    std::string num = std::to_string(o);
    out += std::string(10 - num.size(), '0') + num + " 00000 n \n";
  }
  out += "trailer\n<< /Size " + std::to_string(objs.size() + 1) + " /Root 1 0 R >>\nstartxref\n" + std::to_string(xref) +
         "\n%%EOF\n";
  return out;
}

}  // namespace lancet::testing
