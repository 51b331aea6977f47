// resolve_model: the base model's name, then the adapters'.
#include "server/model_names.h"

namespace lancet::server {

std::optional<ApiError> resolve_model(const ServingModel& model, const std::string& requested,
                                      std::shared_ptr<const LoraRef>* lora) {
  lora->reset();
  if (requested.empty() || requested == model.name()) return std::nullopt;
  if (auto a = model.find_adapter(requested)) {
    *lora = std::move(a);
    return std::nullopt;
  }
  return not_found("The model `" + requested.substr(0, 256) + "` does not exist.", "model", "model_not_found");
}

}  // namespace lancet::server
