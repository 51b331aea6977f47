// GGUF (v2/v3) reader: metadata key/values and tensor infos, tensors viewing the mapped file.
// The file is untrusted: every count, length, dim product and offset is checked against the
// bytes actually present before anything is allocated, and every error names the file and the
// key or tensor at fault.
//
// Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv x (string key,
// u32 type, value), n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type,
// u64 offset), padding to `general.alignment` (default 32), then the data section; tensor
// offsets are relative to it. Strings are u64 length + bytes (no terminator).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace lancet {

// Metadata value types, numbered as in the GGUF spec.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* gguf_type_name(GgufType t);  // "u32", "string", "array", ...

struct GgufValue;
using GgufArray = std::vector<GgufValue>;

// One metadata value. `type` keeps the exact stored type (so files round-trip); the payload is
// widened: unsigned integers in uint64_t, signed in int64_t, f32/f64 in double (exact).
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType elem_type = GgufType::kU8;  // arrays only: the element type (kArray when nested)
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> data = uint64_t{0};

  static GgufValue u8(uint8_t v) { return {GgufType::kU8, GgufType::kU8, uint64_t{v}}; }
  static GgufValue i8(int8_t v) { return {GgufType::kI8, GgufType::kU8, int64_t{v}}; }
  static GgufValue u16(uint16_t v) { return {GgufType::kU16, GgufType::kU8, uint64_t{v}}; }
  static GgufValue i16(int16_t v) { return {GgufType::kI16, GgufType::kU8, int64_t{v}}; }
  static GgufValue u32(uint32_t v) { return {GgufType::kU32, GgufType::kU8, uint64_t{v}}; }
  static GgufValue i32(int32_t v) { return {GgufType::kI32, GgufType::kU8, int64_t{v}}; }
  static GgufValue u64(uint64_t v) { return {GgufType::kU64, GgufType::kU8, v}; }
  static GgufValue i64(int64_t v) { return {GgufType::kI64, GgufType::kU8, v}; }
  static GgufValue f32(float v) { return {GgufType::kF32, GgufType::kU8, double{v}}; }
  static GgufValue f64(double v) { return {GgufType::kF64, GgufType::kU8, v}; }
  static GgufValue boolean(bool v) { return {GgufType::kBool, GgufType::kU8, v}; }
  static GgufValue str(std::string v) {
    return {GgufType::kString, GgufType::kU8, std::move(v)};
  }
  // Every element must have type `elem` (checked by the writer).
  static GgufValue array(GgufType elem, GgufArray items) {
    return {GgufType::kArray, elem, std::move(items)};
  }
  static GgufValue string_array(const std::vector<std::string>& v);

  bool is_integer() const { return std::holds_alternative<uint64_t>(data) || std::holds_alternative<int64_t>(data); }
  bool is_float() const { return std::holds_alternative<double>(data); }
  // Accessors for the widened payload; assert the kind matches.
  uint64_t as_u64() const { return std::get<uint64_t>(data); }
  int64_t as_i64() const { return std::get<int64_t>(data); }
  double as_f64() const { return std::get<double>(data); }
  bool as_bool() const { return std::get<bool>(data); }
  const std::string& as_string() const { return std::get<std::string>(data); }
  const GgufArray& as_array() const { return std::get<GgufArray>(data); }

  bool operator==(const GgufValue& o) const = default;
};

// Human-readable rendering ("576", "\"llama\"", "[1, 2, 3]", arrays abbreviated past 8 items).
std::string gguf_value_to_string(const GgufValue& v);

struct GgufTensor {
  std::string name;
  uint32_t ggml_type = 0;
  DType dtype = DType::kF32;
  std::vector<int64_t> ne;     // ggml order: ne[0] is the contiguous dim
  std::vector<int64_t> shape;  // row-major (ne reversed): shape.back() is contiguous
  uint64_t offset = 0;         // relative to the data section
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  TensorView view() const { return TensorView{dtype, shape, data, nbytes}; }
};

class GgufFile {
 public:
  // Maps and parses a file; tensor data points into the mapping, which the GgufFile keeps.
  static StatusOr<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses bytes in memory (not copied: `data` must outlive the result). `name` is used in
  // error messages in place of a path.
  static StatusOr<std::unique_ptr<GgufFile>> parse(const uint8_t* data, uint64_t size,
                                                   const std::string& name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  bool has(const std::string& key) const { return kv_index_.count(key) != 0; }
  const GgufValue* find(const std::string& key) const;

  // Typed getters: NotFound when the key is absent, InvalidArgument when its type does not
  // fit (any integer type whose value fits is accepted for the integer getters; f32/f64 for
  // the float getters).
  StatusOr<uint32_t> get_u32(const std::string& key) const;
  StatusOr<uint64_t> get_u64(const std::string& key) const;
  StatusOr<int64_t> get_i64(const std::string& key) const;
  StatusOr<float> get_f32(const std::string& key) const;
  StatusOr<double> get_f64(const std::string& key) const;
  StatusOr<bool> get_bool(const std::string& key) const;
  StatusOr<std::string> get_string(const std::string& key) const;
  StatusOr<const GgufArray*> get_array(const std::string& key) const;
  // Arrays of one element kind (strings / any integer type / f32 or f64).
  StatusOr<std::vector<std::string>> get_string_array(const std::string& key) const;
  StatusOr<std::vector<int64_t>> get_int_array(const std::string& key) const;
  StatusOr<std::vector<float>> get_f32_array(const std::string& key) const;

  // Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  Status key_error(const std::string& key, const std::string& what) const;

  std::string path_;
  std::shared_ptr<MappedFile> file_;  // null for parse()
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Entry point for the fuzzer: GgufFile::parse.
StatusOr<std::unique_ptr<GgufFile>> parse_gguf_buffer(const uint8_t* data, uint64_t size,
                                                      const std::string& name);

// Limits the parser enforces beyond the file's own size.
constexpr int kGgufMaxDims = 4;
constexpr int kGgufMaxArrayDepth = 8;  // nesting of arrays of arrays
constexpr uint64_t kGgufDefaultAlignment = 32;
// Memory for decoded metadata (a Llama 3 vocabulary with merges needs ~60 MiB).
constexpr uint64_t kGgufMaxMetadataBytes = uint64_t{1} << 30;

}  // namespace lancet
