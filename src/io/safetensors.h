// safetensors reading and writing. A file is: u64 little-endian header length N, N bytes of
// JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section that the offsets index. Files are untrusted: the header length, every
// offset and every shape product is checked against the file before a view is handed out, and
// every error names the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace lancet {

// Headers past this size are rejected before parsing (real checkpoints use well under 1 MB).
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;

// "F32", "BF16", "F8_E4M3", ... <-> DType. GGUF block types have no safetensors name (nullptr).
const char* safetensors_dtype_name(DType t);
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

struct ParsedSafetensors {
  std::map<std::string, std::string> metadata;  // "__metadata__" (string values only)
  std::map<std::string, TensorView> tensors;    // views into the parsed buffer
  uint64_t data_offset = 0;                     // start of the data section: 8 + header length
};

// Parses a whole safetensors image held in memory; the views point into `data`, which the
// caller keeps alive. `name` (usually the path) prefixes every error message.
StatusOr<ParsedSafetensors> parse_safetensors_buffer(const uint8_t* data /*[size]*/, size_t size,
                                                     const std::string& name);

// One memory-mapped safetensors file; tensor views stay valid while the object lives.
class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path);

  const std::string& path() const { return map_->path(); }
  const std::map<std::string, std::string>& metadata() const { return parsed_.metadata; }
  const std::map<std::string, TensorView>& tensors() const { return parsed_.tensors; }
  const TensorView* find(const std::string& name) const;

 private:
  SafetensorsFile(std::shared_ptr<MappedFile> map, ParsedSafetensors parsed)
      : map_(std::move(map)), parsed_(std::move(parsed)) {}
  std::shared_ptr<MappedFile> map_;
  ParsedSafetensors parsed_;
};

// One or more safetensors files seen as a single tensor table: a lone file, or a sharded
// checkpoint described by model.safetensors.index.json ({"weight_map": {tensor: file}}).
class SafetensorsCheckpoint {
 public:
  static StatusOr<std::unique_ptr<SafetensorsCheckpoint>> open_file(const std::string& path);
  // Every shard named in the weight map is opened once; shard paths must stay inside the
  // index's directory. A tensor the index lists but its shard lacks is an error, as is a
  // tensor found in two shards.
  static StatusOr<std::unique_ptr<SafetensorsCheckpoint>> open_index(
      const std::string& index_path);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  // Path of the file holding `name` ("" if absent); for error messages.
  std::string file_of(const std::string& name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  SafetensorsCheckpoint() = default;
  Status add_file(std::unique_ptr<SafetensorsFile> f);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, size_t> file_index_;  // tensor name -> index into files_
};

// ---- writing ----
struct SafetensorsWriteTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // [nbytes], must equal numel * element size
  uint64_t nbytes = 0;
};

// Header JSON padded with spaces so the data section starts 8-byte aligned (as the spec's
// reference writer does). Tensors are laid out by decreasing element size, so each one is
// aligned to its element size inside the data section.
StatusOr<std::string> serialize_safetensors(const std::vector<SafetensorsWriteTensor>& tensors,
                                            const std::map<std::string, std::string>& metadata = {});
// Streams the same layout to `path` (written to path + ".tmp", then renamed), so a converter
// can write files far larger than memory.
Status write_safetensors(const std::string& path,
                         const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace lancet
