// Sentence splitting and context blocks (sentence_blocks.h) over ICU.
#include "documents/sentence_blocks.h"

#include <memory>

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

namespace lancet::documents {
namespace {

std::string fold_whitespace(std::string_view s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    const bool ws = c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v';
    if (ws) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

StatusOr<std::vector<std::string>> split_sentences(std::string_view utf8) {
  const std::string folded = fold_whitespace(utf8);
  const icu::UnicodeString text = icu::UnicodeString::fromUTF8(icu::StringPiece(folded.data(), static_cast<int32_t>(folded.size())));
  UErrorCode err = U_ZERO_ERROR;
  std::unique_ptr<icu::BreakIterator> it(icu::BreakIterator::createSentenceInstance(icu::Locale::getRoot(), err));
  if (U_FAILURE(err) || !it) return Internal(std::string("ICU sentence iterator: ") + u_errorName(err));
  it->setText(text);
  std::vector<std::string> out;
  for (int32_t start = it->first(), end = it->next(); end != icu::BreakIterator::DONE; start = end, end = it->next()) {
    std::string s;
    text.tempSubStringBetween(start, end).toUTF8String(s);
    s = fold_whitespace(s);
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

StatusOr<std::vector<ContextBlock>> make_blocks(const std::vector<std::string>& pages, int64_t max_block_tokens,
                                                const std::function<int64_t(const std::string&)>& count_tokens) {
  if (max_block_tokens < 1) return InvalidArgument("block size must be at least 1 token");
  std::vector<ContextBlock> blocks;
  for (size_t p = 0; p < pages.size(); ++p) {
    ASSIGN_OR_RETURN(const std::vector<std::string> sentences, split_sentences(pages[p]));
    ContextBlock cur;
    auto flush = [&] {
      if (cur.text.empty()) return;
      cur.id = static_cast<int>(blocks.size()) + 1;
      cur.page = static_cast<int>(p) + 1;
      cur.tokens = count_tokens(cur.text);
      blocks.push_back(std::move(cur));
      cur = ContextBlock{};
    };
    for (const std::string& s : sentences) {
      std::string joined = cur.text;
      if (!joined.empty()) joined += ' ';
      joined += s;
      if (!cur.text.empty() && count_tokens(joined) > max_block_tokens) {
        flush();
        cur.text = s;
      } else {
        cur.text = std::move(joined);
      }
    }
    flush();
  }
  return blocks;
}

}  // namespace lancet::documents
