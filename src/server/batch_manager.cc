// BatchManager: the batch queue and its worker thread (see batch_manager.h).
#include "server/batch_manager.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <tuple>

#include "core/logging.h"

namespace lancet::server {
namespace {

int64_t now_s() { return static_cast<int64_t>(std::time(nullptr)); }

ApiError status_error(const Status& st, const std::string& param) {
  if (st.code() == StatusCode::kNotFound) return not_found(st.message(), param);
  if (st.code() == StatusCode::kFailedPrecondition) return ApiError{409, st.message(), "invalid_request_error", param, "conflict"};
  if (st.code() == StatusCode::kInvalidArgument) return bad_request(st.message(), param);
  return server_error(500, st.message(), "internal_error");
}

}  // namespace

BatchManager::BatchManager(FileStore* files, BatchRunConfig config, std::function<ServingModel*()> model)
    : files_(files), config_(std::move(config)), model_(std::move(model)) {
  thread_ = std::thread([this] { worker(); });
}

BatchManager::~BatchManager() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::optional<ApiError> BatchManager::create(std::string_view body, const RequestLimits& limits, BatchJob* out) {
  BatchCreateRequest req;
  if (auto e = parse_batch_create(body, limits, &req)) return e;
  auto file = files_->get(req.input_file_id);
  if (!file.ok()) return not_found(file.status().message(), "input_file_id");
  if (file->purpose != "batch")
    return bad_request("the input file's purpose is '" + file->purpose + "'; a batch reads files of purpose 'batch'",
                       "input_file_id");
  BatchJob b;
  b.id = new_response_id("batch_");
  b.endpoint = req.endpoint;
  b.input_file_id = req.input_file_id;
  b.completion_window = req.completion_window;
  b.metadata = req.metadata;
  b.created_at = now_s();
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[b.id] = b;
    order_.push_back(b.id);
    queue_.push_back(b.id);
  }
  cv_.notify_all();
  *out = std::move(b);
  return std::nullopt;
}

std::optional<ApiError> BatchManager::get(const std::string& id, BatchJob* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return not_found("No such Batch object: " + id.substr(0, 128), "batch_id");
  *out = it->second;
  return std::nullopt;
}

std::vector<BatchJob> BatchManager::list(int64_t limit, const std::string& after, bool* has_more) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<BatchJob> out;
  size_t start = order_.size();  // walking newest first: index start-1 down to 0
  if (!after.empty()) {
    auto it = std::find(order_.begin(), order_.end(), after);
    start = it == order_.end() ? 0 : static_cast<size_t>(it - order_.begin());
  }
  for (size_t i = start; i > 0 && static_cast<int64_t>(out.size()) < limit; --i) out.push_back(jobs_.at(order_[i - 1]));
  *has_more = start > out.size();
  return out;
}

std::optional<ApiError> BatchManager::cancel(const std::string& id, BatchJob* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return not_found("No such Batch object: " + id.substr(0, 128), "batch_id");
  BatchJob& b = it->second;
  if (b.status != BatchStatus::kCancelling) {
    if (Status st = b.transition(BatchStatus::kCancelling, now_s()); !st.ok()) return status_error(st, "batch_id");
    // A batch still queued has nothing running: it ends now.
    auto q = std::find(queue_.begin(), queue_.end(), id);
    if (q != queue_.end()) {
      queue_.erase(q);
      (void)b.transition(BatchStatus::kCancelled, now_s());
    }
  }
  cv_.notify_all();
  *out = b;
  return std::nullopt;
}

bool BatchManager::wait_final(const std::string& id, double timeout_s) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    auto it = jobs_.find(id);
    return it != jobs_.end() && batch_status_final(it->second.status);
  });
}

bool BatchManager::cancel_requested(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_ || jobs_.at(id).status == BatchStatus::kCancelling;
}

void BatchManager::worker() {
  for (;;) {
    std::string id;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop_ || (!queue_.empty() && model_()); });
      if (stop_) return;
      if (queue_.empty() || !model_()) continue;
      id = queue_.front();
      queue_.pop_front();
    }
    run_one(id);
    cv_.notify_all();
  }
}

void BatchManager::run_one(const std::string& id) {
  std::string input_file_id, endpoint;
  {
    std::lock_guard<std::mutex> lock(mu_);
    input_file_id = job(id).input_file_id;
    endpoint = job(id).endpoint;
  }
  auto fail = [&](const std::string& code, const std::string& message) {
    std::lock_guard<std::mutex> lock(mu_);
    BatchJob& b = job(id);
    b.errors = {{"object", "list"},
                {"data", Json::array({{{"code", code}, {"message", message}, {"param", nullptr}, {"line", nullptr}}})}};
    if (b.status == BatchStatus::kCancelling) (void)b.transition(BatchStatus::kCancelled, now_s());
    else (void)b.transition(BatchStatus::kFailed, now_s());
  };
  auto input = files_->content(input_file_id);
  if (!input.ok()) return fail("input_file_unreadable", input.status().message());
  auto prepared = prepare_batch(*input, endpoint, config_);
  if (!prepared.ok()) return fail("invalid_input_file", prepared.status().message());
  {
    std::lock_guard<std::mutex> lock(mu_);
    BatchJob& b = job(id);
    b.counts.total = static_cast<int64_t>(prepared->parsed.size());
    if (b.status == BatchStatus::kValidating) (void)b.transition(BatchStatus::kInProgress, now_s());
  }
  BatchRunner runner(model_(), config_);
  BatchResult result = runner.run(
      *prepared, [&] { return cancel_requested(id); },
      [&](const BatchCounts& c) {
        std::lock_guard<std::mutex> lock(mu_);
        job(id).counts = c;
      });
  bool cancelled = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    BatchJob& b = job(id);
    b.counts = result.counts;
    cancelled = b.status == BatchStatus::kCancelling;
    if (!cancelled) (void)b.transition(BatchStatus::kFinalizing, now_s());
  }
  std::string output_id, error_id, write_error;
  for (auto [text, name, dst] : {std::tuple{&result.output, "output", &output_id},
                                 std::tuple{&result.errors, "errors", &error_id}}) {
    if (text->empty()) continue;
    auto f = files_->create("batch_" + id.substr(6) + "_" + name + ".jsonl", "batch_output", *text);
    if (f.ok()) *dst = f->id;
    else write_error = f.status().message();
  }
  std::lock_guard<std::mutex> lock(mu_);
  BatchJob& b = job(id);
  b.output_file_id = output_id;
  b.error_file_id = error_id;
  if (!write_error.empty()) {
    LOG_ERROR("batch " << id << ": cannot write its results: " << write_error);
    b.errors = {{"object", "list"},
                {"data", Json::array({{{"code", "output_write_failed"}, {"message", write_error}, {"param", nullptr},
                                       {"line", nullptr}}})}};
  }
  if (cancelled) (void)b.transition(BatchStatus::kCancelled, now_s());
  else (void)b.transition(write_error.empty() ? BatchStatus::kCompleted : BatchStatus::kFailed, now_s());
}

}  // namespace lancet::server
