// GGUF v3 writer (see gguf_writer.h). The header is serialized into memory first (it is small),
// then tensor data is streamed after it, each tensor padded to the alignment.
#include "io/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "core/checked_math.h"
#include "quant/gguf_blocks.h"

namespace lancet {
namespace {

class ByteSink {
 public:
  template <typename T>
  void put(T v) {
    const size_t n = buf_.size();
    buf_.resize(n + sizeof(T));
    std::memcpy(buf_.data() + n, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (buf_.size() % alignment) buf_.push_back(0);
  }
  const std::vector<uint8_t>& bytes() const { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

// Checks that the payload kind matches the declared type (recursively for arrays).
Status check_value(const std::string& key, const GgufValue& v, int depth) {
  auto bad = [&](const char* want) {
    return InvalidArgument("gguf writer: key '" + key + "' declared " + gguf_type_name(v.type) +
                           " holds " + want);
  };
  switch (v.type) {
    case GgufType::kU8: case GgufType::kU16: case GgufType::kU32: case GgufType::kU64:
      if (!std::holds_alternative<uint64_t>(v.data)) return bad("a non-unsigned payload");
      break;
    case GgufType::kI8: case GgufType::kI16: case GgufType::kI32: case GgufType::kI64:
      if (!std::holds_alternative<int64_t>(v.data)) return bad("a non-signed payload");
      break;
    case GgufType::kF32: case GgufType::kF64:
      if (!v.is_float()) return bad("a non-float payload");
      break;
    case GgufType::kBool:
      if (!std::holds_alternative<bool>(v.data)) return bad("a non-bool payload");
      break;
    case GgufType::kString:
      if (!std::holds_alternative<std::string>(v.data)) return bad("a non-string payload");
      break;
    case GgufType::kArray:
      if (!std::holds_alternative<GgufArray>(v.data)) return bad("a non-array payload");
      if (depth >= kGgufMaxArrayDepth) return bad("arrays nested too deeply");
      for (const GgufValue& e : v.as_array()) {
        if (e.type != v.elem_type) return bad("an element of another type");
        RETURN_IF_ERROR(check_value(key, e, depth + 1));
      }
      break;
    default:
      return bad("an unknown type");
  }
  return OkStatus();
}

void put_value(ByteSink& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kU8: out.put(static_cast<uint8_t>(v.as_u64())); break;
    case GgufType::kI8: out.put(static_cast<int8_t>(v.as_i64())); break;
    case GgufType::kU16: out.put(static_cast<uint16_t>(v.as_u64())); break;
    case GgufType::kI16: out.put(static_cast<int16_t>(v.as_i64())); break;
    case GgufType::kU32: out.put(static_cast<uint32_t>(v.as_u64())); break;
    case GgufType::kI32: out.put(static_cast<int32_t>(v.as_i64())); break;
    case GgufType::kU64: out.put(v.as_u64()); break;
    case GgufType::kI64: out.put(v.as_i64()); break;
    case GgufType::kF32: out.put(static_cast<float>(v.as_f64())); break;
    case GgufType::kF64: out.put(v.as_f64()); break;
    case GgufType::kBool: out.put(static_cast<uint8_t>(v.as_bool() ? 1 : 0)); break;
    case GgufType::kString: out.put_string(v.as_string()); break;
    case GgufType::kArray:
      out.put(static_cast<uint32_t>(v.elem_type));
      out.put<uint64_t>(v.as_array().size());
      for (const GgufValue& e : v.as_array()) put_value(out, e);
      break;
  }
}

struct FileCloser {
  void operator()(FILE* f) const { if (f) std::fclose(f); }
};

}  // namespace

void GgufWriter::add(const std::string& key, GgufValue value) {
  kv_.emplace_back(key, std::move(value));
}

Status GgufWriter::check_tensor(const std::string& name, DType dtype,
                                const std::vector<int64_t>& shape, uint64_t* nbytes) const {
  const std::string where = "gguf writer: tensor '" + name + "'";
  if (!ggml_type_from_dtype(dtype)) {
    return InvalidArgument(where + ": dtype " + dtype_name(dtype) + " has no ggml type");
  }
  if (shape.size() > static_cast<size_t>(kGgufMaxDims)) {
    return InvalidArgument(where + ": more than " + std::to_string(kGgufMaxDims) + " dims");
  }
  for (int64_t d : shape) {
    if (d <= 0) return InvalidArgument(where + ": shape " + shape_to_string(shape) + " has a dim <= 0");
  }
  const int64_t row = shape.empty() ? 1 : shape.back();
  if (row % dtype_info(dtype).block_elems != 0) {
    return InvalidArgument(where + ": row length " + std::to_string(row) + " is not a multiple of the " +
                           dtype_name(dtype) + " block size");
  }
  auto numel = checked_product(shape);
  auto nb = numel ? dtype_row_bytes(dtype, *numel) : std::nullopt;
  if (!nb) return InvalidArgument(where + ": size overflows");
  *nbytes = *nb;
  return OkStatus();
}

Status GgufWriter::add_tensor(const std::string& name, DType dtype,
                              const std::vector<int64_t>& shape, std::vector<uint8_t> data) {
  uint64_t nbytes;
  RETURN_IF_ERROR(check_tensor(name, dtype, shape, &nbytes));
  if (data.size() != nbytes) {
    return InvalidArgument("gguf writer: tensor '" + name + "' has " + std::to_string(data.size()) +
                           " bytes; its shape and dtype need " + std::to_string(nbytes));
  }
  tensors_.push_back(Tensor{name, dtype, shape, nbytes, std::move(data), nullptr});
  return OkStatus();
}

Status GgufWriter::add_tensor(const std::string& name, DType dtype,
                              const std::vector<int64_t>& shape, FillFn fill) {
  uint64_t nbytes;
  RETURN_IF_ERROR(check_tensor(name, dtype, shape, &nbytes));
  tensors_.push_back(Tensor{name, dtype, shape, nbytes, {}, std::move(fill)});
  return OkStatus();
}

Status GgufWriter::write(const std::string& path) const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
    return InvalidArgument("gguf writer: alignment " + std::to_string(alignment_) +
                           " is not a power of two");
  }
  std::vector<std::pair<std::string, GgufValue>> kv = kv_;
  std::set<std::string> keys;
  for (const auto& [key, v] : kv) {
    if (!keys.insert(key).second) return InvalidArgument("gguf writer: duplicate key '" + key + "'");
    RETURN_IF_ERROR(check_value(key, v, 0));
  }
  if (const auto it = keys.find("general.alignment"); it != keys.end()) {
    for (const auto& [key, v] : kv) {
      if (key == "general.alignment" &&
          (v.type != GgufType::kU32 || v.as_u64() != alignment_)) {
        return InvalidArgument("gguf writer: general.alignment disagrees with the writer's alignment");
      }
    }
  } else if (alignment_ != kGgufDefaultAlignment) {
    kv.emplace_back("general.alignment", GgufValue::u32(static_cast<uint32_t>(alignment_)));
  }
  std::set<std::string> names;
  for (const Tensor& t : tensors_) {
    if (!names.insert(t.name).second) {
      return InvalidArgument("gguf writer: duplicate tensor '" + t.name + "'");
    }
  }

  ByteSink h;
  h.put<uint32_t>(0x46554747);  // "GGUF" little-endian
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors_.size());
  h.put<uint64_t>(kv.size());
  for (const auto& [key, v] : kv) {
    h.put_string(key);
    h.put(static_cast<uint32_t>(v.type));
    put_value(h, v);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    h.put_string(t.name);
    h.put(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) h.put(static_cast<uint64_t>(*it));
    h.put(*ggml_type_from_dtype(t.dtype));
    h.put(offset);
    offset += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  h.pad_to(alignment_);

  const std::string tmp = path + ".tmp";
  std::unique_ptr<FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  if (!f) return IoError("gguf writer: cannot create " + tmp + ": " + std::strerror(errno));
  auto fail = [&](const Status& s) {
    f.reset();
    std::remove(tmp.c_str());
    return s;
  };
  auto put = [&](const void* p, size_t n) {
    return std::fwrite(p, 1, n, f.get()) == n;
  };
  if (!put(h.bytes().data(), h.bytes().size())) return fail(IoError("gguf writer: write failed: " + tmp));
  std::vector<uint8_t> buf;
  static const uint8_t kZeros[256] = {};
  for (const Tensor& t : tensors_) {
    const uint8_t* src = t.data.data();
    if (t.fill) {
      buf.assign(t.nbytes, 0);
      Status s = t.fill(buf.data(), t.nbytes);
      if (!s.ok()) return fail(s.with_context("gguf writer: tensor '" + t.name + "'"));
      src = buf.data();
    }
    if (!put(src, t.nbytes)) return fail(IoError("gguf writer: write failed: " + tmp));
    uint64_t pad = (alignment_ - t.nbytes % alignment_) % alignment_;
    while (pad > 0) {
      const size_t n = std::min<uint64_t>(pad, sizeof kZeros);
      if (!put(kZeros, n)) return fail(IoError("gguf writer: write failed: " + tmp));
      pad -= n;
    }
  }
  if (std::fclose(f.release()) != 0) {
    std::remove(tmp.c_str());
    return IoError("gguf writer: write failed: " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return IoError("gguf writer: cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  return OkStatus();
}

}  // namespace lancet
