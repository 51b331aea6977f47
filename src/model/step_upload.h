// StepUploader: a step's metadata to the backend in one copy. The arrays are packed into one
// host staging buffer and copied into one device arena; both persist and grow to the largest
// step, so a step costs no allocation and one copy instead of one of each per array.
// The arena is reused by the next upload: that copy is queued behind the work of the step
// before it on the backend's stream, so the view stays valid for the work queued after it.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "model/step.h"

namespace lancet {

class StepUploader {
 public:
  explicit StepUploader(Backend& backend) : be_(backend) {}

  // Copies st's arrays to the backend; the view points into the arena (valid until the next
  // upload).
  StatusOr<StepView> upload(const StepMetadata& st);

  // The arrays' offsets in the arena for a step of these sizes (each 16-byte aligned), and
  // its total size.
  static StepArenaLayout layout(const StepMetadata& st);

 private:
  Backend& be_;
  std::vector<uint8_t> host_;  // staging (a copy from pageable memory is staged at once)
  Buffer dev_;
};

}  // namespace lancet
