// attach_constraints (see request_constraints.h).
#include "server/request_constraints.h"

namespace lancet::server {
namespace {

std::optional<ApiError> attach_output_format(ServingModel* m, ApiRequest* api) {
  structured::ConstraintCache* so = m->structured_outputs();
  const std::string& field = api->output_format_field;
  if (!so) return bad_request("'" + field + "' needs the model's tokenizer, which this model lacks", field);
  auto c = so->constraint(*api->output_format);
  if (!c.ok()) return bad_request("'" + field + "': " + c.status().message(), field);
  api->params.constraint = *c;
  return std::nullopt;
}

// A required or named tool_choice: the output is constrained to the call's schema.
std::optional<ApiError> attach_tool_constraint(ServingModel* m, ApiRequest* api) {
  structured::ConstraintCache* so = m->structured_outputs();
  if (!so) return bad_request("'tool_choice' needs the model's tokenizer, which this model lacks", "tool_choice");
  structured::OutputFormat f;
  f.kind = structured::OutputFormat::Kind::kJsonSchema;
  f.schema = tool_call_schema(api->tools);
  auto c = so->constraint(f);
  if (!c.ok()) return bad_request("'tools': a function's parameters schema: " + c.status().message(), "tools");
  api->params.constraint = *c;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> attach_constraints(ServingModel* model, ApiRequest* api) {
  if (api->output_format)
    if (auto e = attach_output_format(model, api)) return e;
  if (api->tools.enforced()) return attach_tool_constraint(model, api);
  return std::nullopt;
}

}  // namespace lancet::server
