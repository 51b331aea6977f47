// The LoRA adapters a runtime serves, by name, and the model slots they occupy. A load takes a
// free slot (one no reference points at any more: an unloaded adapter keeps its slot until
// the last request computed with it has finished), the caller fills it, and the name becomes
// servable; an unload removes the name at once. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/lora_ref.h"

namespace lancet {

class LoraRegistry {
 public:
  explicit LoraRegistry(int64_t num_slots);

  int64_t num_slots() const { return static_cast<int64_t>(slots_.size()); }
  // Fills slot `slot` with the adapter (the model's weights); called with no lock held.
  using SlotWriter = std::function<Status(int32_t slot)>;
  // Serves `name` (loaded from `path`) from a free slot that `write` fills. InvalidArgument for a
  // name in use, ResourceExhausted when every slot is held; a failed write frees the slot.
  StatusOr<std::shared_ptr<const LoraRef>> load(const std::string& name, const std::string& path,
                                                const SlotWriter& write);
  // NotFound when no adapter is served under `name`.
  Status unload(const std::string& name);
  // Null when no adapter is served under `name`.
  std::shared_ptr<const LoraRef> find(const std::string& name) const;

  struct Entry {
    std::string name;
    std::string path;
    int32_t slot = -1;
  };
  std::vector<Entry> list() const;  // by name

 private:
  struct Served {
    std::shared_ptr<const LoraRef> ref;
    std::string path;
  };
  mutable std::mutex mu_;
  std::map<std::string, Served> served_;
  // Per slot: the adapter in it while anything references it; `reserved` while a load fills it.
  struct Slot {
    std::weak_ptr<const LoraRef> ref;
    bool reserved = false;
  };
  std::vector<Slot> slots_;
  uint64_t loads_ = 0;  // makes each load's id unique
};

}  // namespace lancet
