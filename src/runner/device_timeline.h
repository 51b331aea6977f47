// How long the device sat idle between asynchronous steps: each launched step is bracketed by
// two marks in the backend's queue (Backend::mark_device), one before its first upload and one
// after its draw. A step launched while the previous one was still in flight should find the
// device busy: the time from the previous step's end mark to its begin mark is a gap in which
// the device waited for the host. Steps launched after everything before them was collected
// (the first step of a batch, or a synchronous phase) add busy time but no gap.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace lancet {

// Busy time and gaps of a set of steps.
struct DeviceTimelinePart {
  int64_t steps = 0;          // steps whose marks were both reached
  double busy_seconds = 0;    // sum over those steps of end - begin
  int64_t gaps = 0;           // steps launched while the previous one was in flight
  double gap_seconds = 0;     // sum over those of begin - the previous step's end (>= 0)
  double max_gap_seconds = 0;
  // One entry per gap, in order, for percentiles (the first kMaxGapSamples of them).
  std::vector<double> gap_samples;
  static constexpr size_t kMaxGapSamples = size_t{1} << 20;

  void add_step(double busy) {
    steps += 1;
    busy_seconds += busy;
  }
  void add_gap(double gap);
};

// Every step, and the same split by kind: steps in which every sequence decodes one token, and
// steps with prompt tokens (a gap belongs to the step it precedes: the host's work before that
// step's launch).
struct DeviceTimelineStats : DeviceTimelinePart {
  DeviceTimelinePart decode;
  DeviceTimelinePart prompt;
};

class DeviceTimeline {
 public:
  // A launched step's marks, in launch order.
  void add_step(std::unique_ptr<Backend::DeviceMark> begin, std::unique_ptr<Backend::DeviceMark> end,
                bool follows_in_flight, bool has_prompt = false);
  // Accounts for the oldest steps whose end marks were reached, in launch order; never waits.
  Status harvest();
  // The totals since the last call, and starts over (steps not yet harvested stay).
  DeviceTimelineStats take();
  int64_t num_pending() const { return static_cast<int64_t>(pending_.size()); }

 private:
  struct Step {
    std::unique_ptr<Backend::DeviceMark> begin, end;
    bool follows_in_flight = false;
    bool has_prompt = false;
  };
  std::deque<Step> pending_;
  std::unique_ptr<Backend::DeviceMark> last_end_;  // the last harvested step's end mark
  DeviceTimelineStats stats_;
};

}  // namespace lancet
