// The batch object's state machine and JSON (see batch_job.h).
#include "server/batch_job.h"

namespace lancet::server {

const char* batch_status_name(BatchStatus s) {
  switch (s) {
    case BatchStatus::kValidating: return "validating";
    case BatchStatus::kFailed: return "failed";
    case BatchStatus::kInProgress: return "in_progress";
    case BatchStatus::kFinalizing: return "finalizing";
    case BatchStatus::kCompleted: return "completed";
    case BatchStatus::kCancelling: return "cancelling";
    case BatchStatus::kCancelled: return "cancelled";
  }
  return "failed";
}

bool batch_status_final(BatchStatus s) {
  return s == BatchStatus::kCompleted || s == BatchStatus::kFailed || s == BatchStatus::kCancelled;
}

bool batch_transition_allowed(BatchStatus from, BatchStatus to) {
  using S = BatchStatus;
  switch (from) {
    case S::kValidating: return to == S::kInProgress || to == S::kFailed || to == S::kCancelling;
    case S::kInProgress: return to == S::kFinalizing || to == S::kCancelling || to == S::kFailed;
    case S::kFinalizing: return to == S::kCompleted || to == S::kFailed;
    case S::kCancelling: return to == S::kCancelled;
    default: return false;
  }
}

Status BatchJob::transition(BatchStatus to, int64_t now) {
  if (!batch_transition_allowed(status, to))
    return FailedPrecondition(std::string("a batch with status ") + batch_status_name(status) + " cannot become " +
                              batch_status_name(to));
  status = to;
  switch (to) {
    case BatchStatus::kInProgress: in_progress_at = now; break;
    case BatchStatus::kFinalizing: finalizing_at = now; break;
    case BatchStatus::kCompleted: completed_at = now; break;
    case BatchStatus::kFailed: failed_at = now; break;
    case BatchStatus::kCancelling: cancelling_at = now; break;
    case BatchStatus::kCancelled: cancelled_at = now; break;
    case BatchStatus::kValidating: break;
  }
  return OkStatus();
}

std::optional<ApiError> parse_batch_create(std::string_view body, const RequestLimits& limits, BatchCreateRequest* out) {
  nlohmann::json j;
  if (auto e = parse_json_object(body, limits, &j)) return e;
  auto string_field = [&](const char* name, std::string* dst) -> std::optional<ApiError> {
    auto it = j.find(name);
    if (it == j.end() || !it->is_string() || it->get<std::string>().empty())
      return bad_request(std::string(name) + " is required and must be a string", name);
    *dst = it->get<std::string>();
    return std::nullopt;
  };
  if (auto e = string_field("input_file_id", &out->input_file_id)) return e;
  if (auto e = string_field("endpoint", &out->endpoint)) return e;
  if (auto e = string_field("completion_window", &out->completion_window)) return e;
  if (!is_batch_endpoint(out->endpoint))
    return bad_request("endpoint must be '/v1/chat/completions' or '/v1/completions', not '" +
                           out->endpoint.substr(0, 128) + "'",
                       "endpoint");
  if (out->completion_window != "24h")
    return bad_request("completion_window must be '24h'", "completion_window");
  auto md = j.find("metadata");
  if (md != j.end() && !md->is_null()) {
    if (!md->is_object()) return bad_request("metadata must be an object of strings", "metadata");
    if (md->size() > 16) return bad_request("metadata holds at most 16 keys", "metadata");
    Json m = Json::object();
    for (auto it = md->begin(); it != md->end(); ++it) {
      if (it.key().size() > 64) return bad_request("metadata keys are at most 64 characters", "metadata");
      if (!it->is_string() || it->get<std::string>().size() > 512)
        return bad_request("metadata values must be strings of at most 512 characters", "metadata");
      m[it.key()] = it->get<std::string>();
    }
    out->metadata = std::move(m);
  }
  return std::nullopt;
}

Json batch_json(const BatchJob& b) {
  auto time_or_null = [](int64_t t) { return t > 0 ? Json(t) : Json(nullptr); };
  auto id_or_null = [](const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); };
  Json j;
  j["id"] = b.id;
  j["object"] = "batch";
  j["endpoint"] = b.endpoint;
  j["errors"] = b.errors;
  j["input_file_id"] = b.input_file_id;
  j["completion_window"] = b.completion_window;
  j["status"] = batch_status_name(b.status);
  j["output_file_id"] = id_or_null(b.output_file_id);
  j["error_file_id"] = id_or_null(b.error_file_id);
  j["created_at"] = b.created_at;
  j["in_progress_at"] = time_or_null(b.in_progress_at);
  j["expires_at"] = b.expires_at();
  j["finalizing_at"] = time_or_null(b.finalizing_at);
  j["completed_at"] = time_or_null(b.completed_at);
  j["failed_at"] = time_or_null(b.failed_at);
  j["expired_at"] = nullptr;
  j["cancelling_at"] = time_or_null(b.cancelling_at);
  j["cancelled_at"] = time_or_null(b.cancelled_at);
  j["request_counts"] = {{"total", b.counts.total}, {"completed", b.counts.completed}, {"failed", b.counts.failed}};
  j["metadata"] = b.metadata;
  return j;
}

}  // namespace lancet::server
