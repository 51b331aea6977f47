// The Files API's storage (POST/GET/DELETE /v1/files): uploaded batch inputs and the batch
// results the server writes, kept under one directory as <id> (the bytes) and <id>.json (the
// metadata), so files outlive a restart. Ids are "file-" + 24 hex digits, made here, so a
// client-supplied id never names a path outside the directory. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/openai_json.h"

namespace lancet::server {

struct FileStoreConfig {
  std::string dir;                       // created when missing
  size_t max_file_bytes = 200u << 20;    // OpenAI's limit for batch input files
};

// OpenAI's file object, less the deprecated status fields.
struct StoredFile {
  std::string id;
  std::string filename;
  std::string purpose;  // "batch" (uploads), "batch_output" (results the server writes)
  int64_t bytes = 0;
  int64_t created_at = 0;
};

class FileStore {
 public:
  // Opens (creating) the directory and reads the metadata of the files already there.
  static StatusOr<std::unique_ptr<FileStore>> open(const FileStoreConfig& config);

  const FileStoreConfig& config() const { return config_; }
  // Stores content under a fresh id. InvalidArgument: empty content or filename, a purpose
  // other than "batch"/"batch_output"; ResourceExhausted: over max_file_bytes.
  StatusOr<StoredFile> create(std::string_view filename, std::string_view purpose, std::string_view content);
  // NotFound for an unknown (or malformed) id.
  StatusOr<StoredFile> get(const std::string& id) const;
  StatusOr<std::string> content(const std::string& id) const;
  Status remove(const std::string& id);
  // Newest first; purpose "" lists every file.
  std::vector<StoredFile> list(const std::string& purpose = "") const;

 private:
  explicit FileStore(FileStoreConfig config) : config_(std::move(config)) {}
  std::string data_path(const std::string& id) const;
  std::string meta_path(const std::string& id) const;

  FileStoreConfig config_;
  mutable std::mutex mu_;
  std::map<std::string, StoredFile> files_;
};

// True for ids this store makes ("file-" + hex digits).
bool is_file_id(std::string_view id);
// The file object as OpenAI returns it.
Json file_json(const StoredFile& f);

}  // namespace lancet::server
