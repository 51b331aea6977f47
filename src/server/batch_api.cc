// BatchApi: the /v1/files and /v1/batches handlers (see batch_api.h).
#include "server/batch_api.h"

#include <charconv>

#include "server/http_reply.h"

namespace lancet::server {
namespace {

ApiError file_status_error(const Status& st, const std::string& param) {
  switch (st.code()) {
    case StatusCode::kNotFound: return not_found(st.message(), param);
    case StatusCode::kInvalidArgument: return bad_request(st.message(), param);
    case StatusCode::kResourceExhausted:
      return ApiError{413, st.message(), "invalid_request_error", param, "file_too_large"};
    default: return server_error(500, st.message(), "internal_error");
  }
}

// ?limit=N within [1, 100] (default 20), as OpenAI's list endpoints take it.
std::optional<ApiError> parse_limit(const httplib::Request& req, int64_t* limit) {
  *limit = 20;
  if (!req.has_param("limit")) return std::nullopt;
  const std::string v = req.get_param_value("limit");
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < 1 || n > 100)
    return bad_request("limit must be an integer from 1 to 100", "limit");
  *limit = n;
  return std::nullopt;
}

}  // namespace

BatchApi::BatchApi(const ServerConfig* config, std::function<ServingModel*()> model,
                   std::function<const GuardModel*()> guard_model)
    : config_(config), model_(std::move(model)), guard_model_(std::move(guard_model)) {}

BatchApi::~BatchApi() { shutdown(); }

void BatchApi::shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  batches_.reset();  // joins the worker before the store goes
  files_.reset();
}

size_t BatchApi::upload_limit(const ServerConfig& config) {
  return std::max(config.max_body_bytes, config.max_file_bytes + (1u << 20));
}

bool BatchApi::is_upload(const httplib::Request& req) { return req.method == "POST" && req.path == "/v1/files"; }

bool BatchApi::ready(httplib::Response& res) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) {
    send_error(res, server_error(503, "the server is shutting down", "service_unavailable"));
    return false;
  }
  if (batches_) return true;
  auto store = FileStore::open(FileStoreConfig{config_->batch_dir, config_->max_file_bytes});
  if (!store.ok()) {
    send_error(res, server_error(500, store.status().message(), "internal_error"));
    return false;
  }
  files_ = std::move(*store);
  BatchRunConfig rc;
  rc.max_concurrency = config_->batch_max_concurrency;
  rc.limits = config_->limits;
  rc.request_timeout_s = config_->request_timeout_s;
  rc.guard = config_->guard_rules.get();
  rc.guard_model = guard_model_;
  batches_ = std::make_unique<BatchManager>(files_.get(), rc, model_);
  return true;
}

void BatchApi::upload_file(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
  if (!req.is_multipart_form_data())
    return send_error(res, bad_request("POST /v1/files takes multipart/form-data with the parts 'purpose' and 'file'"));
  if (!ready(res)) return;
  httplib::MultipartFormDataItems parts;
  const size_t limit = upload_limit(*config_);
  size_t total = 0;
  bool too_large = false;
  const bool ok = reader(
      [&](const httplib::MultipartFormData& part) {
        if (parts.size() >= 16) return false;
        parts.push_back(part);
        return true;
      },
      [&](const char* data, size_t n) {
        total += n;
        if (total > limit) {
          too_large = true;
          return false;
        }
        parts.back().content.append(data, n);
        return true;
      });
  if (too_large || total > config_->max_file_bytes + (1u << 20)) {
    res.set_header("Connection", "close");
    return send_error(res, ApiError{413, "the file is larger than the limit of " +
                                             std::to_string(config_->max_file_bytes) + " bytes (--max-file-bytes)",
                                    "invalid_request_error", "file", "file_too_large"});
  }
  if (!ok) {
    res.set_header("Connection", "close");
    return send_error(res, bad_request("the multipart body could not be read"));
  }
  const httplib::MultipartFormData* file = nullptr;
  const httplib::MultipartFormData* purpose = nullptr;
  for (const auto& p : parts) {
    if (p.name == "file" && !file) file = &p;
    if (p.name == "purpose" && !purpose) purpose = &p;
  }
  if (!purpose) return send_error(res, bad_request("the 'purpose' part is missing", "purpose"));
  if (!file) return send_error(res, bad_request("the 'file' part is missing", "file"));
  if (purpose->content != "batch")
    return send_error(res, bad_request("purpose must be 'batch' (the only purpose this server supports)", "purpose"));
  auto f = files_->create(file->filename.empty() ? "upload.jsonl" : file->filename, "batch", file->content);
  if (!f.ok()) return send_error(res, file_status_error(f.status(), "file"));
  send_json(res, file_json(*f));
}

void BatchApi::list_files(const httplib::Request& req, httplib::Response& res) {
  if (!ready(res)) return;
  int64_t limit = 10000;
  if (req.has_param("limit")) {
    if (auto e = parse_limit(req, &limit)) return send_error(res, *e);
  }
  Json data = Json::array();
  for (const StoredFile& f : files_->list(req.has_param("purpose") ? req.get_param_value("purpose") : "")) {
    if (static_cast<int64_t>(data.size()) >= limit) break;
    data.push_back(file_json(f));
  }
  send_json(res, Json{{"object", "list"}, {"data", std::move(data)}, {"has_more", false}});
}

void BatchApi::get_file(const std::string& id, httplib::Response& res) {
  if (!ready(res)) return;
  auto f = files_->get(id);
  if (!f.ok()) return send_error(res, file_status_error(f.status(), "file_id"));
  send_json(res, file_json(*f));
}

void BatchApi::file_content(const std::string& id, httplib::Response& res) {
  if (!ready(res)) return;
  auto c = files_->content(id);
  if (!c.ok()) return send_error(res, file_status_error(c.status(), "file_id"));
  res.set_content(std::move(*c), "application/octet-stream");
}

void BatchApi::delete_file(const std::string& id, httplib::Response& res) {
  if (!ready(res)) return;
  if (Status st = files_->remove(id); !st.ok()) return send_error(res, file_status_error(st, "file_id"));
  send_json(res, Json{{"id", id}, {"object", "file"}, {"deleted", true}});
}

void BatchApi::create_batch(const std::string& body, httplib::Response& res) {
  if (!ready(res)) return;
  BatchJob b;
  if (auto e = batches_->create(body, config_->limits, &b)) return send_error(res, *e);
  send_json(res, batch_json(b));
}

void BatchApi::get_batch(const std::string& id, httplib::Response& res) {
  if (!ready(res)) return;
  BatchJob b;
  if (auto e = batches_->get(id, &b)) return send_error(res, *e);
  send_json(res, batch_json(b));
}

void BatchApi::list_batches(const httplib::Request& req, httplib::Response& res) {
  if (!ready(res)) return;
  int64_t limit = 20;
  if (auto e = parse_limit(req, &limit)) return send_error(res, *e);
  bool has_more = false;
  Json data = Json::array();
  for (const BatchJob& b : batches_->list(limit, req.get_param_value("after"), &has_more)) data.push_back(batch_json(b));
  Json out{{"object", "list"}, {"data", data}};
  out["first_id"] = data.empty() ? Json(nullptr) : data.front()["id"];
  out["last_id"] = data.empty() ? Json(nullptr) : data.back()["id"];
  out["has_more"] = has_more;
  send_json(res, out);
}

void BatchApi::cancel_batch(const std::string& id, httplib::Response& res) {
  if (!ready(res)) return;
  BatchJob b;
  if (auto e = batches_->cancel(id, &b)) return send_error(res, *e);
  send_json(res, batch_json(b));
}

}  // namespace lancet::server
