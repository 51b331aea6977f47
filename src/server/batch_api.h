// The Files and Batch APIs over HTTP: POST/GET/DELETE /v1/files (multipart uploads of batch
// input files) and POST/GET /v1/batches (+ /cancel). The routes are installed by HttpServer,
// which applies its guards (auth, Host, CORS, drain) first; this class owns the FileStore and
// the BatchManager, made on first use so a server that never sees a batch creates no
// directory.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "server/batch_manager.h"
#include "server/file_store.h"
#include "server/httplib_include.h"
#include "server/server_config.h"

namespace lancet::server {

class BatchApi {
 public:
  // guard_model: the guard model once it is loaded (null before, or without --guard-model).
  BatchApi(const ServerConfig* config, std::function<ServingModel*()> model,
           std::function<const GuardModel*()> guard_model = nullptr);
  ~BatchApi();
  // Stops the batch worker (a running batch's requests are aborted); later calls answer 503.
  void shutdown();

  // The largest body POST /v1/files accepts: the file limit plus room for the multipart framing.
  static size_t upload_limit(const ServerConfig& config);
  static bool is_upload(const httplib::Request& req);

  void upload_file(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader);
  void list_files(const httplib::Request& req, httplib::Response& res);
  void get_file(const std::string& id, httplib::Response& res);
  void file_content(const std::string& id, httplib::Response& res);
  void delete_file(const std::string& id, httplib::Response& res);
  void create_batch(const std::string& body, httplib::Response& res);
  void get_batch(const std::string& id, httplib::Response& res);
  void list_batches(const httplib::Request& req, httplib::Response& res);
  void cancel_batch(const std::string& id, httplib::Response& res);

 private:
  // The store and manager, opened on first use; false (with the 500 sent) when the directory
  // cannot be made.
  bool ready(httplib::Response& res);

  const ServerConfig* config_;
  std::function<ServingModel*()> model_;
  std::function<const GuardModel*()> guard_model_;
  std::mutex mu_;
  std::unique_ptr<FileStore> files_;
  std::unique_ptr<BatchManager> batches_;
  bool shut_down_ = false;
};

}  // namespace lancet::server
