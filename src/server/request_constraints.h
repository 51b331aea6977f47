// The grammar constraint a request's output is sampled under: response_format / guided_*
// (structured outputs) or a required / named tool_choice (tool_calls.h), compiled over the
// model's vocabulary into SamplingParams.constraint. Shared by the HTTP handlers and the
// Batch API so both enforce the same requests the same way.
#pragma once

#include <optional>

#include "server/api_error.h"
#include "server/openai_json.h"
#include "server/serving_model.h"

namespace lancet::server {

// 400 naming the field when the model has no tokenizer or the schema does not compile.
std::optional<ApiError> attach_constraints(ServingModel* model, ApiRequest* api);

}  // namespace lancet::server
