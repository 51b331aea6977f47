// The server's batches: POST /v1/batches queues a BatchJob, one worker thread runs the queued
// batches one after another (validating: the input file read line by line; in_progress: the
// BatchRunner; finalizing: the output and error files written to the FileStore), and
// retrieve/list/cancel read or change them from any thread. A cancel takes effect at once for
// a queued batch and within ~100 ms for a running one (its requests in flight are aborted);
// the results finished before it are kept in the files. Batches live in memory (the files
// they read and write are on disk).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "server/batch_job.h"
#include "server/file_store.h"

namespace lancet::server {

class BatchManager {
 public:
  // model(): the model to run on; null while it loads (the worker waits for it).
  BatchManager(FileStore* files, BatchRunConfig config, std::function<ServingModel*()> model);
  ~BatchManager();  // cancels what runs, drops the queue, joins the worker
  BatchManager(const BatchManager&) = delete;
  BatchManager& operator=(const BatchManager&) = delete;

  // Errors: 400 bad body or an input file whose purpose is not "batch", 404 unknown file.
  std::optional<ApiError> create(std::string_view body, const RequestLimits& limits, BatchJob* out);
  std::optional<ApiError> get(const std::string& id, BatchJob* out) const;
  // Newest first, `limit` (1..100) after the batch `after` (exclusive; "" = from the newest).
  std::vector<BatchJob> list(int64_t limit, const std::string& after, bool* has_more) const;
  // 404 unknown id, 409 a batch that already ended.
  std::optional<ApiError> cancel(const std::string& id, BatchJob* out);
  // Waits until the batch's status is final (tests); false on timeout or an unknown id.
  bool wait_final(const std::string& id, double timeout_s) const;

 private:
  void worker();
  void run_one(const std::string& id);
  // Under mu_: the job, asserted to exist.
  BatchJob& job(const std::string& id) { return jobs_.at(id); }
  bool cancel_requested(const std::string& id) const;

  FileStore* files_;
  BatchRunConfig config_;
  std::function<ServingModel*()> model_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // queue changes, status changes, stop
  std::map<std::string, BatchJob> jobs_;
  std::vector<std::string> order_;  // ids in creation order
  std::deque<std::string> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lancet::server
