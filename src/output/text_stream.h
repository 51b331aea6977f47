// The text side of one generated sequence: incremental detokenization (never a partial UTF-8
// character) followed by stop-string matching (never releasing text that may start a stop
// string). The output processor (output_processor.h) feeds it each of the sequence's tokens
// and puts the released text on the token's event.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/stop_strings.h"
#include "tokenizer/stream_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lancet {

class TextStream {
 public:
  // include_stop: the matched stop string is part of the text (else the text ends before it).
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, bool include_stop = false,
             bool skip_special_tokens = true);
  // Text released by this token; *stopped is set when a stop string completed (the returned
  // text then ends right before it, or with it under include_stop, and the stream is over).
  std::string push(int32_t token, bool* stopped);
  // End of generation without a stop string: everything still held.
  std::string finish();

 private:
  std::string released(StopStringMatcher::Result r) const;

  StreamDetokenizer detok_;
  StopStringMatcher stops_;
  bool include_stop_;
};

}  // namespace lancet
