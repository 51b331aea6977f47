// LoraRegistry: names -> references, slots held by weak references.
#include "runtime/lora_registry.h"

namespace lancet {

LoraRegistry::LoraRegistry(int64_t num_slots) : slots_(static_cast<size_t>(num_slots > 0 ? num_slots : 0)) {}

StatusOr<std::shared_ptr<const LoraRef>> LoraRegistry::load(const std::string& name, const std::string& path,
                                                            const SlotWriter& write) {
  int32_t slot = -1;
  uint64_t load_no = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (served_.count(name)) return InvalidArgument("a LoRA adapter named '" + name + "' is already loaded");
    for (size_t s = 0; s < slots_.size() && slot < 0; ++s)
      if (!slots_[s].reserved && slots_[s].ref.expired()) slot = static_cast<int32_t>(s);
    if (slot < 0)
      return ResourceExhausted("all " + std::to_string(slots_.size()) +
                               " LoRA adapter slots (--max-loras) are in use by loaded adapters or by requests "
                               "still running with unloaded ones");
    slots_[static_cast<size_t>(slot)].reserved = true;
    load_no = ++loads_;
  }
  Status s = write(slot);
  std::lock_guard<std::mutex> lock(mu_);
  slots_[static_cast<size_t>(slot)].reserved = false;
  if (!s.ok()) return s;
  if (served_.count(name)) return InvalidArgument("a LoRA adapter named '" + name + "' is already loaded");
  auto ref = std::make_shared<const LoraRef>(LoraRef{slot, name, name + "#" + std::to_string(load_no) + ":" + path});
  slots_[static_cast<size_t>(slot)].ref = ref;
  served_[name] = Served{ref, path};
  return std::shared_ptr<const LoraRef>(ref);
}

Status LoraRegistry::unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!served_.erase(name)) return NotFound("no LoRA adapter named '" + name + "' is loaded");
  return OkStatus();
}

std::shared_ptr<const LoraRef> LoraRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = served_.find(name);
  return it == served_.end() ? nullptr : it->second.ref;
}

std::vector<LoraRegistry::Entry> LoraRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  for (const auto& [name, s] : served_) out.push_back({name, s.path, s.ref->slot});
  return out;
}

}  // namespace lancet
