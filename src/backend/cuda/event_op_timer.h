// The CUDA backend's op timer: a pair of events on the stream around each op, read back by
// take(). Events come from a pool that grows to the largest step and is reused.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "backend/op_timing.h"

namespace lancet::cuda {

std::unique_ptr<OpTimer> make_event_op_timer(cudaStream_t stream);

}  // namespace lancet::cuda
