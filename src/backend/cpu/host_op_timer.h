// The CPU backend's op timer: host-clock spans (its ops have finished when they return).
#pragma once

#include <memory>

#include "backend/op_timing.h"

namespace lancet {

std::unique_ptr<OpTimer> make_host_op_timer();

}  // namespace lancet
