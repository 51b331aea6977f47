#include "runner/device_timeline.h"

#include <algorithm>
#include <utility>

namespace lancet {

void DeviceTimelinePart::add_gap(double gap) {
  gaps += 1;
  gap_seconds += gap;
  max_gap_seconds = std::max(max_gap_seconds, gap);
  if (gap_samples.size() < kMaxGapSamples) gap_samples.push_back(gap);
}

void DeviceTimeline::add_step(std::unique_ptr<Backend::DeviceMark> begin, std::unique_ptr<Backend::DeviceMark> end,
                              bool follows_in_flight, bool has_prompt) {
  pending_.push_back(Step{std::move(begin), std::move(end), follows_in_flight, has_prompt});
}

Status DeviceTimeline::harvest() {
  while (!pending_.empty()) {
    Step& s = pending_.front();
    ASSIGN_OR_RETURN(const bool done, s.end->reached());
    if (!done) break;  // the later steps are behind it in the queue
    ASSIGN_OR_RETURN(const double busy, s.end->seconds_after(*s.begin));
    DeviceTimelinePart& kind = s.has_prompt ? stats_.prompt : stats_.decode;
    stats_.add_step(std::max(0.0, busy));
    kind.add_step(std::max(0.0, busy));
    if (s.follows_in_flight && last_end_) {
      ASSIGN_OR_RETURN(double gap, s.begin->seconds_after(*last_end_));
      gap = std::max(0.0, gap);  // the two events' clocks agree to about a microsecond
      stats_.add_gap(gap);
      kind.add_gap(gap);
    }
    last_end_ = std::move(s.end);
    pending_.pop_front();
  }
  return OkStatus();
}

DeviceTimelineStats DeviceTimeline::take() {
  DeviceTimelineStats out = std::move(stats_);
  stats_ = DeviceTimelineStats{};
  return out;
}

}  // namespace lancet
