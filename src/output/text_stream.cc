// TextStream: detokenizer -> stop-string matcher.
#include "output/text_stream.h"

namespace lancet {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, bool include_stop,
                       bool skip_special_tokens)
    : detok_(tokenizer, DecodeOptions{.skip_special = skip_special_tokens}),
      stops_(std::move(stop_strings)),
      include_stop_(include_stop) {}

std::string TextStream::released(StopStringMatcher::Result r) const {
  if (r.stopped && include_stop_) r.text += stops_.stop_strings()[static_cast<size_t>(r.stop_index)];
  return std::move(r.text);
}

std::string TextStream::push(int32_t token, bool* stopped) {
  StopStringMatcher::Result r = stops_.push(detok_.push(token));
  *stopped = r.stopped;
  return released(std::move(r));
}

std::string TextStream::finish() {
  if (stops_.stopped()) return "";
  StopStringMatcher::Result r = stops_.push(detok_.finish());
  if (r.stopped) return released(std::move(r));
  return r.text + stops_.finish();
}

}  // namespace lancet
