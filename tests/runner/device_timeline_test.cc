// DeviceTimeline over marks whose times and completion the test sets: busy time per step, gaps
// only for steps launched behind one in flight, split by kind of step, harvesting in launch
// order without waiting, and take() starting over.
#include "runner/device_timeline.h"

#include <gtest/gtest.h>

#include <memory>

namespace lancet {
namespace {

// A mark at a fixed time (seconds) that counts as reached once *done is set.
class FakeMark final : public Backend::DeviceMark {
 public:
  FakeMark(double at, std::shared_ptr<bool> done) : at_(at), done_(std::move(done)) {}
  StatusOr<bool> reached() override { return *done_; }
  StatusOr<double> seconds_after(DeviceMark& earlier) override {
    auto* e = dynamic_cast<FakeMark*>(&earlier);
    if (!e) return InvalidArgument("another kind of mark");
    if (!*done_ || !*e->done_) return FailedPrecondition("a mark not reached yet");
    return at_ - e->at_;
  }

 private:
  double at_;
  std::shared_ptr<bool> done_;
};

// One step's marks at [begin, end], both reached when *done is.
struct FakeStep {
  std::shared_ptr<bool> done = std::make_shared<bool>(false);
  void add_to(DeviceTimeline& t, double begin, double end, bool follows, bool prompt = false) const {
    t.add_step(std::make_unique<FakeMark>(begin, done), std::make_unique<FakeMark>(end, done), follows, prompt);
  }
};

TEST(DeviceTimeline, CountsBusyTimeAndGapsBehindStepsInFlight) {
  DeviceTimeline t;
  FakeStep a, b, c, d;
  a.add_to(t, 0.000, 0.010, /*follows=*/false);  // first step: no gap
  b.add_to(t, 0.010, 0.020, true);               // queued behind a: device busy throughout
  c.add_to(t, 0.023, 0.030, true);               // launched late: 3 ms idle
  d.add_to(t, 0.050, 0.060, false);              // after everything was collected: no gap
  *a.done = *b.done = *c.done = *d.done = true;
  ASSERT_TRUE(t.harvest().ok());
  EXPECT_EQ(t.num_pending(), 0);
  const DeviceTimelineStats s = t.take();
  EXPECT_EQ(s.steps, 4);
  EXPECT_NEAR(s.busy_seconds, 0.037, 1e-12);
  EXPECT_EQ(s.gaps, 2);
  EXPECT_NEAR(s.gap_seconds, 0.003, 1e-12);
  EXPECT_NEAR(s.max_gap_seconds, 0.003, 1e-12);
  ASSERT_EQ(s.gap_samples.size(), 2u);
  EXPECT_NEAR(s.gap_samples[0], 0.0, 1e-12);
  EXPECT_NEAR(s.gap_samples[1], 0.003, 1e-12);
  // take() started over.
  const DeviceTimelineStats empty = t.take();
  EXPECT_EQ(empty.steps, 0);
  EXPECT_EQ(empty.gaps, 0);
  EXPECT_TRUE(empty.gap_samples.empty());
}

TEST(DeviceTimeline, SplitsStepsAndGapsByKind) {
  DeviceTimeline t;
  FakeStep a, b, c, d;
  a.add_to(t, 0.000, 0.010, false, /*prompt=*/true);
  b.add_to(t, 0.012, 0.020, true);        // decode, 2 ms gap
  c.add_to(t, 0.025, 0.040, true, true);  // prompt, 5 ms gap: its admission kept the host
  d.add_to(t, 0.040, 0.045, true);        // decode, none
  *a.done = *b.done = *c.done = *d.done = true;
  ASSERT_TRUE(t.harvest().ok());
  const DeviceTimelineStats s = t.take();
  EXPECT_EQ(s.steps, 4);
  EXPECT_EQ(s.gaps, 3);
  EXPECT_NEAR(s.gap_seconds, 0.007, 1e-12);
  EXPECT_EQ(s.prompt.steps, 2);
  EXPECT_NEAR(s.prompt.busy_seconds, 0.025, 1e-12);
  EXPECT_EQ(s.prompt.gaps, 1);
  EXPECT_NEAR(s.prompt.max_gap_seconds, 0.005, 1e-12);
  EXPECT_EQ(s.decode.steps, 2);
  EXPECT_NEAR(s.decode.busy_seconds, 0.013, 1e-12);
  EXPECT_EQ(s.decode.gaps, 2);
  EXPECT_NEAR(s.decode.gap_seconds, 0.002, 1e-12);
  ASSERT_EQ(s.decode.gap_samples.size(), 2u);
  EXPECT_NEAR(s.decode.gap_samples[1], 0.0, 1e-12);
}

TEST(DeviceTimeline, HarvestsInLaunchOrderWithoutWaiting) {
  DeviceTimeline t;
  FakeStep a, b, c;
  a.add_to(t, 0.0, 1.0, false);
  b.add_to(t, 1.5, 2.0, true);
  c.add_to(t, 2.0, 3.0, true);
  ASSERT_TRUE(t.harvest().ok());  // nothing reached: nothing taken
  EXPECT_EQ(t.num_pending(), 3);
  *a.done = true;
  *c.done = true;  // reached, but behind b in the queue: stays until b is
  ASSERT_TRUE(t.harvest().ok());
  EXPECT_EQ(t.num_pending(), 2);
  DeviceTimelineStats s = t.take();
  EXPECT_EQ(s.steps, 1);
  EXPECT_EQ(s.gaps, 0);
  *b.done = true;
  ASSERT_TRUE(t.harvest().ok());
  EXPECT_EQ(t.num_pending(), 0);
  s = t.take();  // b's gap is measured from a's end, taken before
  EXPECT_EQ(s.steps, 2);
  EXPECT_NEAR(s.busy_seconds, 1.5, 1e-12);
  EXPECT_EQ(s.gaps, 2);
  EXPECT_NEAR(s.gap_seconds, 0.5, 1e-12);
  EXPECT_NEAR(s.max_gap_seconds, 0.5, 1e-12);
}

TEST(DeviceTimeline, OverlappingMarksCountNoNegativeGap) {
  DeviceTimeline t;
  FakeStep a, b;
  a.add_to(t, 0.0, 1.0, false);
  b.add_to(t, 1.0 - 1e-7, 2.0, true);  // clocks of two events a hair apart
  *a.done = *b.done = true;
  ASSERT_TRUE(t.harvest().ok());
  const DeviceTimelineStats s = t.take();
  EXPECT_EQ(s.gaps, 1);
  EXPECT_EQ(s.gap_seconds, 0.0);
  EXPECT_EQ(s.max_gap_seconds, 0.0);
}

TEST(DeviceTimeline, HostMarksOfTheCpuBackendTimeTheHostClock) {
  auto be = make_cpu_backend();
  ASSERT_TRUE(be.ok()) << be.status().to_string();
  auto m1 = (*be)->mark_device();
  ASSERT_TRUE(m1.ok());
  auto m2 = (*be)->mark_device();
  ASSERT_TRUE(m2.ok());
  auto r = (*m2)->reached();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  auto dt = (*m2)->seconds_after(**m1);
  ASSERT_TRUE(dt.ok());
  EXPECT_GE(*dt, 0.0);
  EXPECT_LT(*dt, 1.0);
  FakeStep f;
  auto other = std::make_unique<FakeMark>(0.0, f.done);
  EXPECT_FALSE((*m2)->seconds_after(*other).ok());
}

}  // namespace
}  // namespace lancet
