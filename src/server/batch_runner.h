// Runs the requests of one batch input file through the same path as the HTTP handlers
// (openai_json's parsers, then a CompletionSession: encoding, context checks, submission,
// collection), at the engine's batch priority and with at most max_concurrency requests in
// flight, so interactive requests go first and the batch never fills every sequence slot.
// Used by the server's BatchManager and by `lancet run-batch`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "engine/scheduler.h"
#include "guard/guard_rules.h"
#include "server/batch_lines.h"
#include "server/guard_model.h"
#include "server/openai_json.h"
#include "server/serving_model.h"

namespace lancet::server {

struct BatchRunConfig {
  int32_t max_concurrency = 4;        // batch requests in flight at once (--batch-max-concurrency)
  int32_t priority = kBatchPriority;  // engine priority of every batch request
  int64_t max_lines = 50000;          // OpenAI's limit per batch
  RequestLimits limits;
  double request_timeout_s = 0;       // per request, as --timeout; 0 = none
  const guard::GuardRules* guard = nullptr;
  // The guard model (--guard-model), asked per request: it may still be loading when the batch
  // starts (null until it is ready, then every later request is classified). Unset: none.
  std::function<const GuardModel*()> guard_model;
};

struct BatchCounts {
  int64_t total = 0;
  int64_t completed = 0;
  int64_t failed = 0;
};

// A batch input read line by line: each line a runnable request or the reason it is not.
struct PreparedBatch {
  std::string endpoint;
  std::vector<NumberedLine> lines;
  std::vector<std::variant<BatchLine, LineError>> parsed;  // one per line
};

// Reads the input for `endpoint` ("": each line names its own). A bad line is a LineError entry, not a failure; the input
// as a whole fails (InvalidArgument) only when it has no line, more than max_lines, or the
// endpoint is not one a batch may target.
StatusOr<PreparedBatch> prepare_batch(std::string_view input, std::string_view endpoint, const BatchRunConfig& config);

struct BatchResult {
  std::string output;  // JSONL, input order: the requests that answered 200
  std::string errors;  // JSONL, input order: bad lines and failed requests
  std::string all;     // JSONL, input order: both
  BatchCounts counts;
  bool cancelled = false;  // lines not yet finished when cancelled are in neither file
};

class BatchRunner {
 public:
  using Cancelled = std::function<bool()>;
  using Progress = std::function<void(const BatchCounts&)>;

  BatchRunner(ServingModel* model, BatchRunConfig config) : model_(model), config_(std::move(config)) {}
  // Runs every line. `cancelled` is polled between lines and by each request in flight (which
  // then aborts within ~100 ms); `progress` is called after each line (serialized).
  BatchResult run(const PreparedBatch& batch, const Cancelled& cancelled = nullptr,
                  const Progress& progress = nullptr) const;

 private:
  enum class Outcome { kOk, kFailed, kCancelled };
  // One request: its result line (output or error file) and whether it succeeded.
  Outcome run_line(const BatchLine& line, const Cancelled& cancelled, std::string* result) const;

  ServingModel* model_;
  BatchRunConfig config_;
};

}  // namespace lancet::server
