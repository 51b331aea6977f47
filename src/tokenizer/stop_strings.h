// Stop strings for streamed text: finds the first occurrence of any stop string in text that
// arrives in arbitrary chunks (a stop string may span tokens), and never releases text that
// could still turn out to be part of a stop string. Text after the start of a match is dropped
// (the stop string itself is not emitted), as OpenAI-compatible servers do.
// Chunks must be valid UTF-8 (as StreamDetokenizer produces); released text then always ends on
// a character boundary, because held-back text starts where a stop string would start.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lancet {

class StopStringMatcher {
 public:
  struct Result {
    std::string text;     // text safe to emit now
    bool stopped = false;  // a stop string was found; `text` ends right before it
    int stop_index = -1;   // index into the stop strings of the match
  };

  // Empty stop strings are ignored.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Consumes the next chunk. After a stop, further pushes return nothing.
  Result push(std::string_view chunk);
  // End of the stream without a stop: releases the held-back text.
  std::string finish();

  bool stopped() const { return stopped_; }
  size_t held_bytes() const { return held_.size(); }
  const std::vector<std::string>& stop_strings() const { return stops_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace lancet
