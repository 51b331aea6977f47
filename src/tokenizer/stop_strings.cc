// Stop-string matching over a stream; see stop_strings.h.
#include "tokenizer/stop_strings.h"

#include <algorithm>

namespace lancet {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view chunk) {
  Result r;
  if (stopped_) return r;
  if (stops_.empty()) {  // nothing to match: the chunk passes through
    r.text.assign(chunk);
    return r;
  }
  held_.append(chunk);
  // Earliest match wins; among matches at the same position, the first stop string listed.
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t p = held_.find(stops_[i]);
    if (p < best) {
      best = p;
      r.stop_index = static_cast<int>(i);
    }
  }
  if (best != std::string::npos) {
    r.text = held_.substr(0, best);
    r.stopped = true;
    stopped_ = true;
    held_.clear();
    return r;
  }
  // No full match: keep the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopStringMatcher::finish() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace lancet
