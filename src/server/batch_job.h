// One batch of the Batch API (/v1/batches) and its state machine, as OpenAI defines it:
//   validating -> in_progress -> finalizing -> completed
//   validating -> failed                      (the input file cannot be run at all)
//   validating | in_progress -> cancelling -> cancelled
// (expired is never reached: the server runs every batch to the end.) Each transition stamps
// its *_at time. The JSON is the batch object of OpenAI's API.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "server/batch_runner.h"
#include "server/openai_json.h"

namespace lancet::server {

enum class BatchStatus { kValidating, kFailed, kInProgress, kFinalizing, kCompleted, kCancelling, kCancelled };
const char* batch_status_name(BatchStatus s);
bool batch_transition_allowed(BatchStatus from, BatchStatus to);
// No further transition (completed, failed, cancelled).
bool batch_status_final(BatchStatus s);

struct BatchJob {
  std::string id;  // "batch_..."
  std::string endpoint;
  std::string input_file_id;
  std::string completion_window = "24h";
  Json metadata = nullptr;
  BatchStatus status = BatchStatus::kValidating;
  std::string output_file_id;  // "" -> null
  std::string error_file_id;
  Json errors = nullptr;  // {"object": "list", "data": [{code, message, param, line}]} when failed
  BatchCounts counts;
  int64_t created_at = 0;
  int64_t in_progress_at = 0;  // 0 -> null, as are the other times
  int64_t finalizing_at = 0;
  int64_t completed_at = 0;
  int64_t failed_at = 0;
  int64_t cancelling_at = 0;
  int64_t cancelled_at = 0;

  // Moves to `to`, stamping its time; FailedPrecondition when the state machine forbids it.
  Status transition(BatchStatus to, int64_t now);
  int64_t expires_at() const { return created_at + 24 * 3600; }
};

// POST /v1/batches's body, checked: input_file_id, endpoint, completion_window "24h", and
// metadata (at most 16 string pairs, keys up to 64 and values up to 512 bytes).
struct BatchCreateRequest {
  std::string input_file_id;
  std::string endpoint;
  std::string completion_window;
  Json metadata = nullptr;
};
std::optional<ApiError> parse_batch_create(std::string_view body, const RequestLimits& limits, BatchCreateRequest* out);

Json batch_json(const BatchJob& b);

}  // namespace lancet::server
