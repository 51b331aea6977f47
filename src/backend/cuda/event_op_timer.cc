#include "backend/cuda/event_op_timer.h"

#include <string>
#include <vector>

namespace lancet::cuda {
namespace {

class EventOpTimer final : public OpTimer {
 public:
  explicit EventOpTimer(cudaStream_t s) : stream_(s) {}
  ~EventOpTimer() override {
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
    for (const Span& sp : spans_) {
      if (sp.begin) cudaEventDestroy(sp.begin);
      if (sp.end) cudaEventDestroy(sp.end);
    }
    if (last_end_) cudaEventDestroy(last_end_);
  }

  Status take(OpTimes* acc) override {
    const cudaError_t recorded = error_;
    error_ = cudaSuccess;
    Status st = recorded == cudaSuccess ? OkStatus()
                                        : Internal(std::string("op timing: event record: ") + cudaGetErrorString(recorded));
    if (st.ok() && !spans_.empty()) {
      const cudaError_t e = cudaEventSynchronize(spans_.back().end);
      if (e != cudaSuccess) st = Internal(std::string("op timing: ") + cudaGetErrorString(e));
    }
    for (size_t i = 0; st.ok() && i < spans_.size(); ++i) {
      float ms = 0;
      const cudaError_t e = cudaEventElapsedTime(&ms, spans_[i].begin, spans_[i].end);
      if (e != cudaSuccess) {
        st = Internal(std::string("op timing: ") + cudaGetErrorString(e));
        break;
      }
      acc->ms[static_cast<int>(spans_[i].kind)] += ms;
      acc->calls[static_cast<int>(spans_[i].kind)] += 1;
    }
    if (st.ok()) {
      acc->steps += 1;
      float gap = 0;
      if (!spans_.empty() && last_end_ && cudaEventElapsedTime(&gap, last_end_, spans_.front().begin) == cudaSuccess) {
        acc->gap_ms += gap;
        acc->gaps += 1;
      }
    }
    // The events go back to the pool, except the last end, which the next step's gap needs.
    if (!spans_.empty()) {
      give(last_end_);
      last_end_ = nullptr;
      if (st.ok())
        last_end_ = spans_.back().end;
      else
        give(spans_.back().end);
      for (size_t i = 0; i < spans_.size(); ++i) {
        give(spans_[i].begin);
        if (i + 1 < spans_.size()) give(spans_[i].end);
      }
    }
    spans_.clear();
    return st;
  }

 protected:
  void start(OpKind k) override { spans_.push_back({k, record(), nullptr}); }
  void stop() override { spans_.back().end = record(); }

 private:
  struct Span {
    OpKind kind;
    cudaEvent_t begin, end;
  };
  void give(cudaEvent_t e) {
    if (e) pool_.push_back(e);
  }
  // An event recorded on the stream now (null when none could be made; take() reports it).
  cudaEvent_t record() {
    cudaEvent_t e = nullptr;
    if (!pool_.empty()) {
      e = pool_.back();
      pool_.pop_back();
    } else if (cudaError_t c = cudaEventCreate(&e); c != cudaSuccess) {
      if (error_ == cudaSuccess) error_ = c;
      cudaGetLastError();
      return nullptr;
    }
    if (cudaError_t c = cudaEventRecord(e, stream_); c != cudaSuccess && error_ == cudaSuccess) {
      error_ = c;
      cudaGetLastError();
    }
    return e;
  }

  cudaStream_t stream_;
  std::vector<cudaEvent_t> pool_;
  std::vector<Span> spans_;
  cudaEvent_t last_end_ = nullptr;
  cudaError_t error_ = cudaSuccess;
};

}  // namespace

std::unique_ptr<OpTimer> make_event_op_timer(cudaStream_t stream) { return std::make_unique<EventOpTimer>(stream); }

}  // namespace lancet::cuda
