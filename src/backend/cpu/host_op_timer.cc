#include "backend/cpu/host_op_timer.h"

#include <chrono>
#include <vector>

namespace lancet {
namespace {

class HostOpTimer final : public OpTimer {
 public:
  Status take(OpTimes* acc) override {
    for (const Span& s : spans_) {
      acc->ms[static_cast<int>(s.kind)] += ms_between(s.begin, s.end);
      acc->calls[static_cast<int>(s.kind)] += 1;
    }
    acc->steps += 1;
    if (!spans_.empty()) {
      if (has_last_) {
        acc->gap_ms += ms_between(last_end_, spans_.front().begin);
        acc->gaps += 1;
      }
      last_end_ = spans_.back().end;
      has_last_ = true;
    }
    spans_.clear();
    return OkStatus();
  }

 protected:
  void start(OpKind k) override { spans_.push_back({k, Clock::now(), {}}); }
  void stop() override { spans_.back().end = Clock::now(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Span {
    OpKind kind;
    Clock::time_point begin, end;
  };
  static double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  }
  std::vector<Span> spans_;
  Clock::time_point last_end_{};
  bool has_last_ = false;
};

}  // namespace

std::unique_ptr<OpTimer> make_host_op_timer() { return std::make_unique<HostOpTimer>(); }

}  // namespace lancet
