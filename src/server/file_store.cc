// FileStore: files as <dir>/<id> plus <dir>/<id>.json metadata (see file_store.h). A file is
// written to a temporary name and renamed, so a crash never leaves a half-written file that
// the next start would list.
#include "server/file_store.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace lancet::server {
namespace fs = std::filesystem;
namespace {

Status write_file(const std::string& path, std::string_view content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return IoError("cannot write " + tmp);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) return IoError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return IoError("cannot rename " + tmp + ": " + ec.message());
  return OkStatus();
}

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool is_file_id(std::string_view id) {
  if (id.size() < 6 || id.size() > 64 || id.substr(0, 5) != "file-") return false;
  for (char c : id.substr(5))
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

Json file_json(const StoredFile& f) {
  Json j;
  j["id"] = f.id;
  j["object"] = "file";
  j["bytes"] = f.bytes;
  j["created_at"] = f.created_at;
  j["filename"] = f.filename;
  j["purpose"] = f.purpose;
  // Deprecated in OpenAI's API but still sent (and read by older clients).
  j["status"] = "processed";
  j["status_details"] = nullptr;
  return j;
}

StatusOr<std::unique_ptr<FileStore>> FileStore::open(const FileStoreConfig& config) {
  if (config.dir.empty()) return InvalidArgument("the file store needs a directory (--batch-dir)");
  std::error_code ec;
  fs::create_directories(config.dir, ec);
  if (ec || !fs::is_directory(config.dir))
    return IoError("cannot create the batch directory '" + config.dir + "'" + (ec ? ": " + ec.message() : ""));
  std::unique_ptr<FileStore> store(new FileStore(config));
  for (const auto& entry : fs::directory_iterator(config.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".json" || !is_file_id(entry.path().stem().string())) continue;
    auto text = read_file(entry.path().string());
    if (!text.ok()) continue;
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !fs::exists(store->data_path(entry.path().stem().string()))) continue;
    StoredFile f;
    f.id = entry.path().stem().string();
    f.filename = j.value("filename", "");
    f.purpose = j.value("purpose", "");
    f.bytes = j.value("bytes", int64_t{0});
    f.created_at = j.value("created_at", int64_t{0});
    store->files_[f.id] = f;
  }
  return store;
}

std::string FileStore::data_path(const std::string& id) const { return config_.dir + "/" + id; }
std::string FileStore::meta_path(const std::string& id) const { return config_.dir + "/" + id + ".json"; }

StatusOr<StoredFile> FileStore::create(std::string_view filename, std::string_view purpose, std::string_view content) {
  if (purpose != "batch" && purpose != "batch_output")
    return InvalidArgument("purpose must be 'batch' (the only purpose this server supports), not '" +
                           std::string(purpose.substr(0, 64)) + "'");
  if (filename.empty()) return InvalidArgument("the file has no filename");
  if (filename.size() > 512) return InvalidArgument("the filename is longer than 512 bytes");
  if (content.empty()) return InvalidArgument("the file is empty");
  if (content.size() > config_.max_file_bytes)
    return ResourceExhausted("the file is " + std::to_string(content.size()) + " bytes; the limit is " +
                             std::to_string(config_.max_file_bytes) + " bytes (--max-file-bytes)");
  StoredFile f;
  f.id = new_response_id("file-");
  f.filename = std::string(filename);
  f.purpose = std::string(purpose);
  f.bytes = static_cast<int64_t>(content.size());
  f.created_at = static_cast<int64_t>(std::time(nullptr));
  RETURN_IF_ERROR(write_file(data_path(f.id), content));
  const nlohmann::json meta = {{"filename", f.filename}, {"purpose", f.purpose}, {"bytes", f.bytes},
                               {"created_at", f.created_at}};
  RETURN_IF_ERROR(write_file(meta_path(f.id), meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  std::lock_guard<std::mutex> lock(mu_);
  files_[f.id] = f;
  return f;
}

StatusOr<StoredFile> FileStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(id);
  if (it == files_.end()) return NotFound("No such File object: " + id.substr(0, 128));
  return it->second;
}

StatusOr<std::string> FileStore::content(const std::string& id) const {
  ASSIGN_OR_RETURN(StoredFile f, get(id));
  return read_file(data_path(f.id));
}

Status FileStore::remove(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (files_.erase(id) == 0) return NotFound("No such File object: " + id.substr(0, 128));
  }
  std::error_code ec;
  fs::remove(meta_path(id), ec);
  fs::remove(data_path(id), ec);
  return OkStatus();
}

std::vector<StoredFile> FileStore::list(const std::string& purpose) const {
  std::vector<StoredFile> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, f] : files_)
      if (purpose.empty() || f.purpose == purpose) out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const StoredFile& a, const StoredFile& b) {
    return a.created_at > b.created_at;
  });
  return out;
}

}  // namespace lancet::server
