// Which model a request names: the served base model ("" or its name) or one of the LoRA
// adapters it serves under their own names (ServingModel::find_adapter). Anything else is the
// 404 model_not_found that vLLM and OpenAI answer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/lora_ref.h"
#include "server/api_error.h"
#include "server/serving_model.h"

namespace lancet::server {

// *lora: null for the base model, else the adapter (held by the request until it ends).
std::optional<ApiError> resolve_model(const ServingModel& model, const std::string& requested,
                                      std::shared_ptr<const LoraRef>* lora);

}  // namespace lancet::server
