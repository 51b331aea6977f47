// Streaming detokenizer; see stream_detokenizer.h.
#include "tokenizer/stream_detokenizer.h"

#include "tokenizer/utf8.h"

namespace lancet {

StreamDetokenizer::StreamDetokenizer(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(tokenizer), options_(options) {}

std::string StreamDetokenizer::push(int32_t id) {
  if (options_.skip_special && tokenizer_.is_special(id)) return {};
  const std::string_view bytes = tokenizer_.token_bytes(id);
  std::string out;
  if (pending_.empty()) {
    // Nothing held back (the usual case): the token's bytes straight through, only an
    // incomplete trailing character kept for the next token.
    const size_t used = utf8_append_lossy(bytes, /*final=*/false, &out);
    if (used < bytes.size()) pending_.assign(bytes.substr(used));
    return out;
  }
  pending_.append(bytes);
  const size_t used = utf8_append_lossy(pending_, /*final=*/false, &out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDetokenizer::finish() {
  std::string out;
  utf8_append_lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace lancet
