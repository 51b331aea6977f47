// Read-only memory map of a whole file. Weights are used straight from the map (no copy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace lancet {

class MappedFile {
 public:
  static StatusOr<std::shared_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace lancet
