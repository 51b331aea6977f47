// Per-op timing of a backend (a profiling mode): where a step's device time goes, by kind of
// op, and how long the device sits idle between steps. Each backend op runs inside an OpScope;
// nested ops (a fused op built from others) count once, as the outermost. The CPU backend
// times ops with the host clock (they run synchronously), the CUDA backend with events on its
// stream (which keeps back-to-back kernels from overlapping, so steps run a little slower than
// without timing, and graphs cannot be captured while it is on).
#pragma once

#include <array>
#include <cstdint>

#include "core/status.h"

namespace lancet {

enum class OpKind : uint8_t {
  kEmbedding,
  kNorm,        // RMSNorm, with or without the residual add
  kGemm,        // matmul, matmul_multi, matmul_gate_up_silu (its SiLU epilogue included)
  kRope,
  kKvWrite,
  kAttention,
  kActivation,  // silu_mul on its own
  kGather,      // gather_rows
  kSampling,    // sample_rows (with its copy of the tokens to the host)
  kLora,        // lora_apply (a LoRA adapter's shrink and expand)
};
inline constexpr int kNumOpKinds = 10;

inline const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kNorm: return "norm";
    case OpKind::kGemm: return "gemm";
    case OpKind::kRope: return "rope";
    case OpKind::kKvWrite: return "kv_write";
    case OpKind::kAttention: return "attention";
    case OpKind::kActivation: return "activation";
    case OpKind::kGather: return "gather";
    case OpKind::kSampling: return "sampling";
    case OpKind::kLora: return "lora";
  }
  return "?";
}

// Totals over the steps taken so far.
struct OpTimes {
  std::array<double, kNumOpKinds> ms{};
  std::array<int64_t, kNumOpKinds> calls{};
  int64_t steps = 0;
  // Device idle time from the end of one step's last op to the start of the next step's first
  // op, over `gaps` such pairs of consecutive steps.
  double gap_ms = 0;
  int64_t gaps = 0;

  double busy_ms() const {
    double s = 0;
    for (double v : ms) s += v;
    return s;
  }
  void add(const OpTimes& o) {
    for (int i = 0; i < kNumOpKinds; ++i) {
      ms[i] += o.ms[i];
      calls[i] += o.calls[i];
    }
    steps += o.steps;
    gap_ms += o.gap_ms;
    gaps += o.gaps;
  }
};

class OpTimer {
 public:
  virtual ~OpTimer() = default;
  void begin(OpKind k) {
    if (depth_++ == 0) start(k);
  }
  void end() {
    if (--depth_ == 0) stop();
  }
  // Waits for the ops begun since the last call, adds their times to *acc (steps += 1, and
  // the gap since the previous call's last op) and starts over.
  virtual Status take(OpTimes* acc) = 0;

 protected:
  virtual void start(OpKind k) = 0;
  virtual void stop() = 0;

 private:
  int depth_ = 0;
};

// Times one op on `timer` (null: timing off).
class OpScope {
 public:
  OpScope(OpTimer* timer, OpKind k) : t_(timer) {
    if (t_) t_->begin(k);
  }
  ~OpScope() {
    if (t_) t_->end();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpTimer* t_;
};

}  // namespace lancet
