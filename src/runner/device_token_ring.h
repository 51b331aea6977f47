// The device side of asynchronous steps on one rank (runner/model_executor.h, launch_step):
// each launched step draws its tokens into a backend buffer of its own (two, used in turn),
// the next step's fed input tokens are scattered from there into its token ids before its
// forward runs, and a copy of the tokens to pinned host memory is started behind the draw and
// waited for only when the step is collected. A slot is reused two launches later, after its
// step was collected (at most two steps are launched and not collected), so neither the draw
// nor the copy of a step can overwrite tokens still being read.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "runner/model_executor.h"

namespace lancet {

class DeviceTokenRing {
 public:
  explicit DeviceTokenRing(Backend& backend) : be_(backend) {}

  // Before the step's forward: checks the feeds against the step's num_tokens and the previous
  // launched step's samples and stages them in backend memory.
  Status prepare_feeds(std::span<const TokenFeed> feeds, int64_t num_tokens);
  // Writes the staged feeds into the step's token ids (backend memory: the uploaded metadata
  // or a decode graph's arena), behind the upload.
  Status apply_feeds(int32_t* token_ids);
  // After the forward: draws the rows from logits [num_rows, vocab] (backend memory) into the
  // next slot (on the device with device sampling; otherwise the logits come to the host and
  // the CPU sampler draws them) and starts the copy back.
  Status sample(const float* logits, int64_t num_rows, int64_t vocab, std::span<const DeviceSampleRow> rows);
  // Waits for the oldest uncollected step's tokens.
  Status collect(std::vector<int32_t>* tokens);
  int64_t num_launched() const { return static_cast<int64_t>(pending_.size()); }

 private:
  struct Slot {
    Buffer dev;   // [capacity] the step's tokens in backend memory
    Buffer host;  // [capacity] their copy (pinned where the backend has it)
    int64_t count = 0;
    std::unique_ptr<Backend::PendingCopy> copy;
  };

  Backend& be_;
  std::array<Slot, 2> slots_;
  int next_ = 0;       // the slot the next launched step draws into
  int last_ = -1;      // the last launched step's slot (the feeds' source); -1 before any
  std::deque<int> pending_;  // launched, not collected, oldest first
  std::vector<int32_t> feed_host_;  // [n, 2] staged pairs
  Buffer feed_dev_;
  int64_t num_feeds_ = 0;
  std::vector<float> host_logits_;  // host draws (backends without device sampling)
  std::vector<int32_t> host_tokens_;
};

}  // namespace lancet
