// BatchRunner: a pool of max_concurrency workers over the batch's lines, each line a
// CompletionSession at the batch priority (see batch_runner.h).
#include "server/batch_runner.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "server/completion_session.h"
#include "server/request_constraints.h"
#include "server/model_names.h"

namespace lancet::server {

StatusOr<PreparedBatch> prepare_batch(std::string_view input, std::string_view endpoint, const BatchRunConfig& config) {
  if (!endpoint.empty() && !is_batch_endpoint(endpoint))
    return InvalidArgument("endpoint must be '/v1/chat/completions' or '/v1/completions', not '" +
                           std::string(endpoint.substr(0, 128)) + "'");
  PreparedBatch b;
  b.endpoint = std::string(endpoint);
  b.lines = split_jsonl(input);
  if (b.lines.empty()) return InvalidArgument("the input file has no request lines");
  if (static_cast<int64_t>(b.lines.size()) > config.max_lines)
    return InvalidArgument("the input file has " + std::to_string(b.lines.size()) + " lines; a batch holds at most " +
                           std::to_string(config.max_lines));
  b.parsed.reserve(b.lines.size());
  for (const NumberedLine& l : b.lines) {
    BatchLine bl;
    if (auto e = parse_batch_line(l.text, endpoint, config.limits, &bl)) {
      e->message = "line " + std::to_string(l.number) + ": " + e->message;
      e->custom_id = bl.custom_id;
      b.parsed.emplace_back(std::in_place_type<LineError>, std::move(*e));
    } else {
      b.parsed.emplace_back(std::move(bl));
    }
  }
  return b;
}

BatchRunner::Outcome BatchRunner::run_line(const BatchLine& line, const Cancelled& cancelled,
                                           std::string* result) const {
  const ApiKind kind = line.url == "/v1/chat/completions" ? ApiKind::kChat : ApiKind::kCompletion;
  const std::string request_id = new_response_id("req_");
  auto fail = [&](const ApiError& e) {
    *result = response_line(line.custom_id, e.status, request_id, error_json(e));
    return Outcome::kFailed;
  };
  ApiRequest api;
  auto err = kind == ApiKind::kChat ? parse_chat_request(line.body, config_.limits, &api)
                                    : parse_completion_request(line.body, config_.limits, &api);
  if (err) return fail(*err);
  if (auto e = resolve_model(*model_, api.model, &api.lora)) return fail(*e);
  if (auto e = attach_constraints(model_, &api)) return fail(*e);
  // Batch requests are not counted in the serving metrics: those describe interactive traffic.
  CompletionSession session(model_, /*metrics=*/nullptr, std::move(api), config_.request_timeout_s);
  session.set_priority(config_.priority);
  if (config_.guard) session.set_guard(config_.guard);
  if (config_.guard_model)
    if (const GuardModel* gm = config_.guard_model()) session.set_guard_model(gm);
  if (cancelled) session.set_client_gone(cancelled);
  if (auto e = session.submit()) return fail(*e);
  Json body;
  if (auto e = session.collect(&body)) {
    if (cancelled && cancelled()) return Outcome::kCancelled;
    return fail(*e);
  }
  *result = response_line(line.custom_id, 200, request_id, body);
  return Outcome::kOk;
}

BatchResult BatchRunner::run(const PreparedBatch& batch, const Cancelled& cancelled, const Progress& progress) const {
  const size_t n = batch.parsed.size();
  std::vector<Outcome> outcomes(n, Outcome::kCancelled);
  std::vector<std::string> lines(n);
  BatchCounts counts;
  counts.total = static_cast<int64_t>(n);
  std::mutex mu;  // guards counts and the progress calls
  // Bad lines are answered at once; only the runnable ones take a worker.
  std::vector<size_t> runnable;
  for (size_t i = 0; i < n; ++i) {
    if (const auto* e = std::get_if<LineError>(&batch.parsed[i])) {
      lines[i] = line_error_line(*e);
      outcomes[i] = Outcome::kFailed;
      counts.failed++;
    } else {
      runnable.push_back(i);
    }
  }
  if (progress) progress(counts);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (;;) {
      if (cancelled && cancelled()) return;
      const size_t k = next.fetch_add(1);
      if (k >= runnable.size()) return;
      const size_t i = runnable[k];
      const Outcome o = run_line(std::get<BatchLine>(batch.parsed[i]), cancelled, &lines[i]);
      outcomes[i] = o;
      if (o == Outcome::kCancelled) return;
      std::lock_guard<std::mutex> lock(mu);
      (o == Outcome::kOk ? counts.completed : counts.failed)++;
      if (progress) progress(counts);
    }
  };
  const size_t workers = std::min<size_t>(static_cast<size_t>(std::max(config_.max_concurrency, 1)), runnable.size());
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) pool.emplace_back(worker);
  for (auto& t : pool) t.join();

  BatchResult r;
  r.counts = counts;
  r.cancelled = cancelled && cancelled() && counts.completed + counts.failed < counts.total;
  for (size_t i = 0; i < n; ++i) {
    if (outcomes[i] == Outcome::kCancelled) continue;
    std::string& dst = outcomes[i] == Outcome::kOk ? r.output : r.errors;
    dst += lines[i];
    dst += '\n';
    r.all += lines[i];
    r.all += '\n';
  }
  return r;
}

}  // namespace lancet::server
