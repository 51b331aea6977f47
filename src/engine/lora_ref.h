// The LoRA adapter a request is computed with: its slot in the model (StepMetadata's LoRA
// rows) and the identity its prefix-cache blocks are keyed with, so that the same prompt under
// two adapters (or under an adapter reloaded from another file) shares no KV. The runtime's
// registry (runtime/lora_registry.h) hands these out; a request's sequences hold theirs until
// they finish, and a slot is reused only when no reference to its adapter is left.
#pragma once

#include <cstdint>
#include <string>

namespace lancet {

struct LoraRef {
  int32_t slot = -1;
  std::string name;  // what requests call it (the served model name)
  std::string id;    // unique per load: the prefix-cache salt's adapter part
};

}  // namespace lancet
