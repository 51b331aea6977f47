#include "runner/device_timeline.h"

#include <algorithm>
#include <utility>

namespace lancet {

void DeviceTimeline::add_step(std::unique_ptr<Backend::DeviceMark> begin, std::unique_ptr<Backend::DeviceMark> end,
                              bool follows_in_flight) {
  pending_.push_back(Step{std::move(begin), std::move(end), follows_in_flight});
}

Status DeviceTimeline::harvest() {
  while (!pending_.empty()) {
    Step& s = pending_.front();
    ASSIGN_OR_RETURN(const bool done, s.end->reached());
    if (!done) break;  // the later steps are behind it in the queue
    ASSIGN_OR_RETURN(const double busy, s.end->seconds_after(*s.begin));
    stats_.steps += 1;
    stats_.busy_seconds += std::max(0.0, busy);
    if (s.follows_in_flight && last_end_) {
      ASSIGN_OR_RETURN(double gap, s.begin->seconds_after(*last_end_));
      gap = std::max(0.0, gap);  // the two events' clocks agree to about a microsecond
      stats_.gaps += 1;
      stats_.gap_seconds += gap;
      stats_.max_gap_seconds = std::max(stats_.max_gap_seconds, gap);
      if (stats_.gap_samples.size() < DeviceTimelineStats::kMaxGapSamples) stats_.gap_samples.push_back(gap);
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
