// GGUF reader (see gguf.h). The parser walks the header once with a bounds-checked cursor;
// counts are compared with the bytes left (at the smallest possible size per entry) before any
// container is reserved, so a corrupt count fails fast instead of allocating.
#include "io/gguf.h"

#include <cstring>
#include <limits>

#include "core/checked_math.h"
#include "quant/gguf_blocks.h"

namespace lancet {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "unknown";
}

GgufValue GgufValue::string_array(const std::vector<std::string>& v) {
  GgufArray items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(str(s));
  return array(GgufType::kString, std::move(items));
}

std::string gguf_value_to_string(const GgufValue& v) {
  switch (v.type) {
    case GgufType::kString: return "\"" + v.as_string() + "\"";
    case GgufType::kBool: return v.as_bool() ? "true" : "false";
    case GgufType::kF32:
    case GgufType::kF64: return std::to_string(v.as_f64());
    case GgufType::kArray: {
      const GgufArray& a = v.as_array();
      std::string s = "[";
      for (size_t i = 0; i < a.size() && i < 8; ++i) s += (i ? ", " : "") + gguf_value_to_string(a[i]);
      if (a.size() > 8) s += ", ... (" + std::to_string(a.size()) + " items)";
      return s + "]";
    }
    default:
      return std::holds_alternative<uint64_t>(v.data) ? std::to_string(v.as_u64())
                                                      : std::to_string(v.as_i64());
  }
}

namespace {

// Fixed size of a scalar type, 0 for string/array, nullopt for an unknown type id.
std::optional<uint64_t> scalar_size(uint32_t t) {
  switch (static_cast<GgufType>(t)) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: case GgufType::kArray: return 0;
  }
  return std::nullopt;
}

// Smallest encoding of one value of type t: strings are at least their u64 length, arrays
// their u32 type + u64 count.
uint64_t min_value_size(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 12;
  return *scalar_size(static_cast<uint32_t>(t));
}

constexpr uint64_t kMinKvSize = 8 + 4 + 1;           // key length, type, one-byte value
constexpr uint64_t kMinTensorInfoSize = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

}  // namespace

// Bounds-checked little-endian cursor over the file; builds the GgufFile.
class GgufParser {
 public:
  GgufParser(GgufFile* f) : f_(f), p_(f->base_), size_(f->size_) {}

  Status parse() {
    RETURN_IF_ERROR(parse_header());
    RETURN_IF_ERROR(parse_metadata());
    RETURN_IF_ERROR(parse_alignment());
    RETURN_IF_ERROR(parse_tensor_infos());
    return place_tensors();
  }

 private:
  Status err(const std::string& what) const {
    return InvalidArgument(f_->path_ + ": " + what);
  }
  Status truncated(const std::string& what) const {
    return err("truncated file: " + what + " at offset " + std::to_string(pos_) + " runs past the end (" +
               std::to_string(size_) + " bytes)");
  }
  uint64_t left() const { return size_ - pos_; }

  // Metadata is materialized (a GgufValue per array element): bound its memory so a file of
  // huge byte arrays cannot make the parser allocate many times the file size.
  Status charge(uint64_t bytes, const std::string& key) {
    metadata_bytes_ += bytes;  // bytes <= file size * sizeof(GgufValue): no overflow
    if (metadata_bytes_ > kGgufMaxMetadataBytes) {
      return err("key '" + key + "': metadata needs more than " +
                 std::to_string(kGgufMaxMetadataBytes >> 20) + " MiB of memory");
    }
    return OkStatus();
  }

  template <typename T>
  Status read(T* out, const std::string& what) {
    if (left() < sizeof(T)) return truncated(what);
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }

  Status read_string(std::string* out, const std::string& what) {
    uint64_t len = 0;
    RETURN_IF_ERROR(read(&len, what + " length"));
    if (len > left()) {
      return truncated(what + " of " + std::to_string(len) + " bytes");
    }
    out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return OkStatus();
  }

  Status parse_header() {
    if (size_ < 4 || std::memcmp(p_, "GGUF", 4) != 0) {
      return err("not a GGUF file (bad magic; expected \"GGUF\")");
    }
    pos_ = 4;
    RETURN_IF_ERROR(read(&f_->version_, "version"));
    if (f_->version_ != 2 && f_->version_ != 3) {
      std::string hint = f_->version_ == 1 ? " (GGUF v1 is obsolete; re-convert the model)"
                         : (f_->version_ & 0xffff) == 0 ? " (a big-endian file?)" : "";
      return Unimplemented(f_->path_ + ": unsupported GGUF version " +
                           std::to_string(f_->version_) + hint + "; versions 2 and 3 are read");
    }
    RETURN_IF_ERROR(read(&n_tensors_, "tensor count"));
    RETURN_IF_ERROR(read(&n_kv_, "metadata count"));
    // Each entry takes at least a few bytes; counts that cannot fit are corrupt.
    uint64_t need_kv, need_t, need;
    if (!checked_mul(n_kv_, kMinKvSize, &need_kv) || need_kv > left()) {
      return err("metadata count " + std::to_string(n_kv_) + " cannot fit in the file (" +
                 std::to_string(left()) + " bytes left)");
    }
    if (!checked_mul(n_tensors_, kMinTensorInfoSize, &need_t) || !checked_add(need_kv, need_t, &need) ||
        need > left()) {
      return err("tensor count " + std::to_string(n_tensors_) + " cannot fit in the file (" +
                 std::to_string(left()) + " bytes left)");
    }
    return OkStatus();
  }

  Status read_value(GgufType type, const std::string& key, int depth, GgufValue* out) {
    out->type = type;
    switch (type) {
      case GgufType::kU8: { uint8_t v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = uint64_t{v}; break; }
      case GgufType::kI8: { int8_t v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = int64_t{v}; break; }
      case GgufType::kU16: { uint16_t v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = uint64_t{v}; break; }
      case GgufType::kI16: { int16_t v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = int64_t{v}; break; }
      case GgufType::kU32: { uint32_t v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = uint64_t{v}; break; }
      case GgufType::kI32: { int32_t v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = int64_t{v}; break; }
      case GgufType::kU64: { uint64_t v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = v; break; }
      case GgufType::kI64: { int64_t v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = v; break; }
      case GgufType::kF32: { float v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = double{v}; break; }
      case GgufType::kF64: { double v = 0; RETURN_IF_ERROR(read(&v, key)); out->data = v; break; }
      case GgufType::kBool: {
        uint8_t v = 0;
        RETURN_IF_ERROR(read(&v, key));
        if (v > 1) return err("key '" + key + "': bool value " + std::to_string(v) + " is not 0 or 1");
        out->data = v != 0;
        break;
      }
      case GgufType::kString: {
        std::string s;
        RETURN_IF_ERROR(read_string(&s, "key '" + key + "' string value"));
        RETURN_IF_ERROR(charge(s.size(), key));
        out->data = std::move(s);
        break;
      }
      case GgufType::kArray: {
        if (depth >= kGgufMaxArrayDepth) {
          return err("key '" + key + "': arrays nested deeper than " +
                     std::to_string(kGgufMaxArrayDepth));
        }
        uint32_t et = 0;
        uint64_t count = 0;
        RETURN_IF_ERROR(read(&et, "key '" + key + "' array type"));
        if (!scalar_size(et)) {
          return err("key '" + key + "': unknown array element type " + std::to_string(et));
        }
        RETURN_IF_ERROR(read(&count, "key '" + key + "' array length"));
        const GgufType elem = static_cast<GgufType>(et);
        uint64_t need;
        if (!checked_mul(count, min_value_size(elem), &need) || need > left()) {
          return truncated("key '" + key + "' array of " + std::to_string(count) + " " +
                           gguf_type_name(elem) + " values");
        }
        RETURN_IF_ERROR(charge(count * sizeof(GgufValue), key));
        GgufArray items(count);
        for (uint64_t i = 0; i < count; ++i) {
          RETURN_IF_ERROR(read_value(elem, key, depth + 1, &items[i]));
        }
        out->elem_type = elem;
        out->data = std::move(items);
        break;
      }
    }
    return OkStatus();
  }

  Status parse_metadata() {
    f_->kv_.reserve(n_kv_);
    for (uint64_t i = 0; i < n_kv_; ++i) {
      std::string key;
      RETURN_IF_ERROR(read_string(&key, "metadata key #" + std::to_string(i)));
      if (key.empty()) return err("metadata key #" + std::to_string(i) + " is empty");
      if (f_->kv_index_.count(key)) return err("duplicate metadata key '" + key + "'");
      uint32_t type = 0;
      RETURN_IF_ERROR(read(&type, "key '" + key + "' type"));
      if (!scalar_size(type)) {
        return err("key '" + key + "': unknown value type " + std::to_string(type));
      }
      GgufValue v;
      RETURN_IF_ERROR(read_value(static_cast<GgufType>(type), key, 0, &v));
      f_->kv_index_.emplace(key, f_->kv_.size());
      f_->kv_.emplace_back(std::move(key), std::move(v));
    }
    return OkStatus();
  }

  Status parse_alignment() {
    const GgufValue* a = f_->find("general.alignment");
    if (!a) return OkStatus();
    if (!a->is_integer()) {
      return err("key 'general.alignment' has type " + std::string(gguf_type_name(a->type)) +
                 "; expected an integer");
    }
    const bool neg = std::holds_alternative<int64_t>(a->data) && a->as_i64() < 0;
    const uint64_t v = std::holds_alternative<uint64_t>(a->data) ? a->as_u64()
                                                                  : static_cast<uint64_t>(a->as_i64());
    if (neg || v == 0 || (v & (v - 1)) != 0 || v > (1u << 30)) {
      return err("key 'general.alignment' is " + gguf_value_to_string(*a) +
                 "; it must be a power of two (at most 2^30)");
    }
    f_->alignment_ = v;
    return OkStatus();
  }

  Status parse_tensor_infos() {
    f_->tensors_.reserve(n_tensors_);
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      GgufTensor t;
      RETURN_IF_ERROR(read_string(&t.name, "tensor #" + std::to_string(i) + " name"));
      const std::string where = "tensor '" + t.name + "'";
      if (f_->tensor_index_.count(t.name)) return err("duplicate " + where);
      uint32_t n_dims = 0;
      RETURN_IF_ERROR(read(&n_dims, where + " n_dims"));
      if (n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
        return err(where + " has " + std::to_string(n_dims) + " dims; at most " +
                   std::to_string(kGgufMaxDims) + " are allowed");
      }
      uint64_t numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t ne = 0;
        RETURN_IF_ERROR(read(&ne, where + " dim " + std::to_string(d)));
        if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return err(where + " has invalid dim ne[" + std::to_string(d) + "] = " + std::to_string(ne));
        }
        if (!checked_mul(numel, ne, &numel) ||
            numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return err(where + ": the product of its dims overflows");
        }
        t.ne.push_back(static_cast<int64_t>(ne));
      }
      t.shape.assign(t.ne.rbegin(), t.ne.rend());
      RETURN_IF_ERROR(read(&t.ggml_type, where + " type"));
      auto dt = dtype_from_ggml_type(t.ggml_type);
      if (!dt) {
        return Unimplemented(f_->path_ + ": " + where + " has ggml type " +
                             std::to_string(t.ggml_type) + ", which is not supported");
      }
      t.dtype = *dt;
      RETURN_IF_ERROR(read(&t.offset, where + " offset"));
      const DTypeInfo& info = dtype_info(t.dtype);
      const uint64_t row = t.ne.empty() ? 1 : static_cast<uint64_t>(t.ne[0]);
      if (row % info.block_elems != 0) {
        return err(where + ": row length " + std::to_string(row) + " is not a multiple of the " +
                   info.name + " block size " + std::to_string(info.block_elems));
      }
      auto nbytes = dtype_row_bytes(t.dtype, numel);
      if (!nbytes) return err(where + ": byte size overflows");
      t.nbytes = *nbytes;
      f_->tensor_index_.emplace(t.name, f_->tensors_.size());
      f_->tensors_.push_back(std::move(t));
    }
    return OkStatus();
  }

  Status place_tensors() {
    const uint64_t a = f_->alignment_;
    uint64_t data_start;
    if (!checked_add(pos_, a - 1, &data_start)) return err("header size overflows");
    data_start -= data_start % a;
    f_->data_offset_ = data_start;
    for (GgufTensor& t : f_->tensors_) {
      const std::string where = "tensor '" + t.name + "'";
      if (t.offset % a != 0) {
        return err(where + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                   std::to_string(a));
      }
      uint64_t begin;
      if (!checked_add(data_start, t.offset, &begin) || begin > size_) {
        return err(where + ": offset " + std::to_string(t.offset) + " is past the end of the file (" +
                   std::to_string(size_) + " bytes, data section at " + std::to_string(data_start) + ")");
      }
      if (!range_within(begin, t.nbytes, size_)) {
        return err(where + ": " + std::to_string(t.nbytes) + " bytes at file offset " +
                   std::to_string(begin) + " run past the end of the file (" + std::to_string(size_) +
                   " bytes)");
      }
      t.data = f_->base_ + begin;
    }
    return OkStatus();
  }

  GgufFile* f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t metadata_bytes_ = 0;
};

StatusOr<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, uint64_t size,
                                                    const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->base_ = data;
  f->size_ = data ? size : 0;
  GgufParser parser(f.get());
  RETURN_IF_ERROR(parser.parse());
  return f;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> m, MappedFile::open(path));
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, parse(m->data(), m->size(), path));
  f->file_ = std::move(m);
  return f;
}

StatusOr<std::unique_ptr<GgufFile>> parse_gguf_buffer(const uint8_t* data, uint64_t size,
                                                      const std::string& name) {
  return GgufFile::parse(data, size, name);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Status GgufFile::key_error(const std::string& key, const std::string& what) const {
  return InvalidArgument(path_ + ": key '" + key + "' " + what);
}

namespace {

// Integer payload as a signed 128-bit-safe pair: ok=false for non-integers.
bool int_value(const GgufValue& v, bool* negative, uint64_t* magnitude) {
  if (std::holds_alternative<uint64_t>(v.data)) {
    *negative = false;
    *magnitude = v.as_u64();
    return true;
  }
  if (std::holds_alternative<int64_t>(v.data)) {
    const int64_t i = v.as_i64();
    *negative = i < 0;
    *magnitude = i < 0 ? static_cast<uint64_t>(-(i + 1)) + 1 : static_cast<uint64_t>(i);
    return true;
  }
  return false;
}

}  // namespace

#define LANCET_GGUF_FIND(key)                                                 \
  const GgufValue* v = find(key);                                             \
  if (!v) return NotFound(path_ + ": metadata key '" + (key) + "' is missing")

StatusOr<uint64_t> GgufFile::get_u64(const std::string& key) const {
  LANCET_GGUF_FIND(key);
  bool neg;
  uint64_t mag;
  if (!int_value(*v, &neg, &mag) || neg) {
    return key_error(key, "is " + std::string(gguf_type_name(v->type)) + " " +
                              gguf_value_to_string(*v) + "; expected a non-negative integer");
  }
  return mag;
}

StatusOr<uint32_t> GgufFile::get_u32(const std::string& key) const {
  ASSIGN_OR_RETURN(uint64_t x, get_u64(key));
  if (x > std::numeric_limits<uint32_t>::max()) {
    return key_error(key, "value " + std::to_string(x) + " does not fit in 32 bits");
  }
  return static_cast<uint32_t>(x);
}

StatusOr<int64_t> GgufFile::get_i64(const std::string& key) const {
  LANCET_GGUF_FIND(key);
  bool neg;
  uint64_t mag;
  if (!int_value(*v, &neg, &mag)) {
    return key_error(key, "has type " + std::string(gguf_type_name(v->type)) + "; expected an integer");
  }
  if (!neg && mag > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return key_error(key, "value " + std::to_string(mag) + " does not fit in int64");
  }
  return neg ? v->as_i64() : static_cast<int64_t>(mag);
}

StatusOr<double> GgufFile::get_f64(const std::string& key) const {
  LANCET_GGUF_FIND(key);
  if (!v->is_float()) {
    return key_error(key, "has type " + std::string(gguf_type_name(v->type)) + "; expected f32 or f64");
  }
  return v->as_f64();
}

StatusOr<float> GgufFile::get_f32(const std::string& key) const {
  ASSIGN_OR_RETURN(double x, get_f64(key));
  return static_cast<float>(x);
}

StatusOr<bool> GgufFile::get_bool(const std::string& key) const {
  LANCET_GGUF_FIND(key);
  if (v->type != GgufType::kBool) {
    return key_error(key, "has type " + std::string(gguf_type_name(v->type)) + "; expected bool");
  }
  return v->as_bool();
}

StatusOr<std::string> GgufFile::get_string(const std::string& key) const {
  LANCET_GGUF_FIND(key);
  if (v->type != GgufType::kString) {
    return key_error(key, "has type " + std::string(gguf_type_name(v->type)) + "; expected string");
  }
  return v->as_string();
}

StatusOr<const GgufArray*> GgufFile::get_array(const std::string& key) const {
  LANCET_GGUF_FIND(key);
  if (v->type != GgufType::kArray) {
    return key_error(key, "has type " + std::string(gguf_type_name(v->type)) + "; expected array");
  }
  return &v->as_array();
}

StatusOr<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufArray* a, get_array(key));
  std::vector<std::string> out;
  out.reserve(a->size());
  for (const GgufValue& e : *a) {
    if (e.type != GgufType::kString) return key_error(key, "is not an array of strings");
    out.push_back(e.as_string());
  }
  return out;
}

StatusOr<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufArray* a, get_array(key));
  std::vector<int64_t> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    const GgufValue& e = (*a)[i];
    if (std::holds_alternative<int64_t>(e.data)) {
      out.push_back(e.as_i64());
    } else if (std::holds_alternative<uint64_t>(e.data) &&
               e.as_u64() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      out.push_back(static_cast<int64_t>(e.as_u64()));
    } else {
      return key_error(key, "element " + std::to_string(i) + " is not an int64 integer");
    }
  }
  return out;
}

StatusOr<std::vector<float>> GgufFile::get_f32_array(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufArray* a, get_array(key));
  std::vector<float> out;
  out.reserve(a->size());
  for (const GgufValue& e : *a) {
    if (!e.is_float()) return key_error(key, "is not an array of floats");
    out.push_back(static_cast<float>(e.as_f64()));
  }
  return out;
}

#undef LANCET_GGUF_FIND

}  // namespace lancet
