// TextStream: detokenizer -> stop-string matcher.
#include "engine/text_stream.h"

namespace lancet {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                       bool skip_special_tokens)
    : detok_(tokenizer, DecodeOptions{.skip_special = skip_special_tokens}),
      stops_(std::move(stop_strings)) {}

std::string TextStream::push(int32_t token, bool* stopped) {
  StopStringMatcher::Result r = stops_.push(detok_.push(token));
  *stopped = r.stopped;
  return std::move(r.text);
}

std::string TextStream::finish() {
  if (stops_.stopped()) return "";
  StopStringMatcher::Result r = stops_.push(detok_.finish());
  if (r.stopped) return std::move(r.text);
  return r.text + stops_.finish();
}

}  // namespace lancet
