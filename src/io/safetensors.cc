// safetensors parsing (header -> bounds-checked views), sharded index loading, and the writer.
#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/checked_math.h"
#include "io/text_file.h"

namespace lancet {
namespace {

using json = nlohmann::json;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kNames[] = {
    {DType::kF32, "F32"},         {DType::kF16, "F16"},         {DType::kBF16, "BF16"},
    {DType::kF8E4M3, "F8_E4M3"},  {DType::kF8E5M2, "F8_E5M2"},  {DType::kF64, "F64"},
    {DType::kI8, "I8"},           {DType::kU8, "U8"},           {DType::kI16, "I16"},
    {DType::kI32, "I32"},         {DType::kI64, "I64"},         {DType::kBool, "BOOL"},
};

uint64_t elem_bytes(DType t) { return dtype_info(t).block_bytes; }  // plain types: 1 elem/block

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// Reads a JSON integer that must fit a non-negative int64 (shape dims) or uint64 (offsets).
bool json_to_u64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  uint64_t begin = 0, end = 0;
};

// Parses one tensor's header entry into *view (data pointer set by the caller).
Status parse_entry(const std::string& file, const std::string& name, const json& v,
                   uint64_t data_size, TensorView* view, Entry* entry) {
  const std::string where = file + ": tensor " + in_quotes(name) + ": ";
  if (!v.is_object()) return InvalidArgument(where + "header entry is not an object");
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return InvalidArgument(where + "missing string 'dtype'");
  auto dtype = dtype_from_safetensors_name(dt->get_ref<const std::string&>());
  if (!dtype) {
    return Unimplemented(where + "unsupported dtype " + in_quotes(dt->get<std::string>()));
  }
  view->dtype = *dtype;

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return InvalidArgument(where + "missing array 'shape'");
  view->shape.clear();
  for (const json& d : *sh) {
    uint64_t u;
    if (!json_to_u64(d, &u) || u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument(where + "shape has a dim that is not a non-negative integer: " +
                             d.dump());
    }
    view->shape.push_back(static_cast<int64_t>(u));
  }
  auto numel = checked_product(view->shape);
  uint64_t nbytes = 0;
  if (!numel || !checked_mul(*numel, elem_bytes(*dtype), &nbytes)) {
    return InvalidArgument(where + "shape " + shape_to_string(view->shape) +
                           " overflows 64-bit size");
  }
  // TensorView::numel() multiplies in int64: keep the element count representable.
  if (*numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument(where + "shape " + shape_to_string(view->shape) + " is too large");
  }

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2) {
    return InvalidArgument(where + "'data_offsets' must be an array [begin, end]");
  }
  uint64_t begin, end;
  if (!json_to_u64((*off)[0], &begin) || !json_to_u64((*off)[1], &end)) {
    return InvalidArgument(where + "data_offsets must be non-negative integers: " + off->dump());
  }
  if (end < begin) {
    return InvalidArgument(where + "data_offsets end " + std::to_string(end) + " < begin " +
                           std::to_string(begin));
  }
  if (end > data_size) {
    return InvalidArgument(where + "data_offsets [" + std::to_string(begin) + ", " +
                           std::to_string(end) + "] past the data section of " +
                           std::to_string(data_size) + " bytes (file truncated?)");
  }
  if (end - begin != nbytes) {
    return InvalidArgument(where + "holds " + std::to_string(end - begin) + " bytes but " +
                           dt->get<std::string>() + " " + shape_to_string(view->shape) +
                           " needs " + std::to_string(nbytes));
  }
  view->nbytes = nbytes;
  entry->name = name;
  entry->begin = begin;
  entry->end = end;
  return OkStatus();
}

Status parse_metadata(const std::string& file, const json& v,
                      std::map<std::string, std::string>* out) {
  if (!v.is_object()) return InvalidArgument(file + ": __metadata__ is not an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string()) {
      return InvalidArgument(file + ": __metadata__ value " + in_quotes(it.key()) +
                             " is not a string");
    }
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return OkStatus();
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const auto& n : kNames) {
    if (n.dtype == t) return n.name;
  }
  return nullptr;
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& n : kNames) {
    if (name == n.name) return n.dtype;
  }
  return std::nullopt;
}

StatusOr<ParsedSafetensors> parse_safetensors_buffer(const uint8_t* data, size_t size,
                                                     const std::string& name) {
  if (size < 8) {
    return InvalidArgument(name + ": " + std::to_string(size) +
                           " bytes is too short for a safetensors file (8-byte header length)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];  // little-endian
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return InvalidArgument(name + ": header length " + std::to_string(header_len) +
                           " is over the limit of " + std::to_string(kSafetensorsMaxHeaderBytes) +
                           " bytes (not a safetensors file?)");
  }
  if (!range_within(8, header_len, size)) {
    return InvalidArgument(name + ": header length " + std::to_string(header_len) +
                           " runs past the end of the " + std::to_string(size) + "-byte file");
  }
  const char* hbegin = reinterpret_cast<const char*>(data + 8);
  if (header_len == 0 || hbegin[0] != '{') {
    return InvalidArgument(name + ": header does not start with '{' (not a safetensors file?)");
  }

  // Duplicate top-level keys would silently shadow a tensor; the parser callback sees them.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(hbegin, hbegin + header_len, on_event);
  } catch (const json::exception& e) {
    return InvalidArgument(name + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) return InvalidArgument(name + ": header is not a JSON object");
  if (!duplicate.empty()) {
    return InvalidArgument(name + ": tensor " + in_quotes(duplicate) + " appears twice in the header");
  }

  ParsedSafetensors out;
  out.data_offset = 8 + header_len;
  const uint64_t data_size = size - out.data_offset;
  const uint8_t* base = data + out.data_offset;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        RETURN_IF_ERROR(parse_metadata(name, it.value(), &out.metadata));
        continue;
      }
      if (it.key().empty()) return InvalidArgument(name + ": a tensor has an empty name");
      TensorView view;
      Entry entry;
      RETURN_IF_ERROR(parse_entry(name, it.key(), it.value(), data_size, &view, &entry));
      view.data = base + entry.begin;
      entries.push_back(entry);
      out.tensors.emplace(it.key(), std::move(view));
    }
  } catch (const json::exception& e) {
    // Type checks above should make this unreachable; keep a bad file from escaping as a throw.
    return InvalidArgument(name + ": malformed header: " + e.what());
  }

  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Empty tensors occupy no bytes and may share an offset with anything, so compare each
  // tensor with the non-empty one reaching furthest before it.
  const Entry* prev_ptr = nullptr;
  for (const Entry& cur : entries) {
    if (cur.end == cur.begin) continue;
    if (prev_ptr && cur.begin < prev_ptr->end) {
      const Entry& prev = *prev_ptr;
      return InvalidArgument(name + ": tensor " + in_quotes(cur.name) + " bytes [" +
                             std::to_string(cur.begin) + ", " + std::to_string(cur.end) +
                             ") overlap tensor " + in_quotes(prev.name) + " bytes [" +
                             std::to_string(prev.begin) + ", " + std::to_string(prev.end) + ")");
    }
    prev_ptr = &cur;
  }
  return out;
}

// ---- SafetensorsFile ----

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  ASSIGN_OR_RETURN(auto parsed, parse_safetensors_buffer(map->data(), map->size(), path));
  return std::unique_ptr<SafetensorsFile>(new SafetensorsFile(std::move(map), std::move(parsed)));
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = parsed_.tensors.find(name);
  return it == parsed_.tensors.end() ? nullptr : &it->second;
}

// ---- SafetensorsCheckpoint ----

Status SafetensorsCheckpoint::add_file(std::unique_ptr<SafetensorsFile> f) {
  size_t idx = files_.size();
  for (const auto& [name, view] : f->tensors()) {
    auto [it, inserted] = tensors_.emplace(name, view);
    if (!inserted) {
      return InvalidArgument("tensor " + in_quotes(name) + " is in both " +
                             files_[file_index_[name]]->path() + " and " + f->path());
    }
    file_index_[name] = idx;
  }
  files_.push_back(std::move(f));
  return OkStatus();
}

StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open_file(
    const std::string& path) {
  ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(path));
  std::unique_ptr<SafetensorsCheckpoint> ck(new SafetensorsCheckpoint());
  RETURN_IF_ERROR(ck->add_file(std::move(f)));
  return ck;
}

namespace {
// A shard path from the index must name a file inside the index's directory.
Status check_shard_path(const std::string& index_path, const std::string& tensor,
                        const std::string& shard) {
  auto bad = [&](const char* why) {
    return InvalidArgument(index_path + ": tensor " + in_quotes(tensor) + " maps to " +
                           in_quotes(shard) + ", " + why);
  };
  if (shard.empty()) return bad("an empty file name");
  if (shard.find('\0') != std::string::npos) return bad("a name with a NUL byte");
  std::filesystem::path p(shard);
  if (p.is_absolute() || shard[0] == '/') return bad("an absolute path outside the model directory");
  for (const auto& part : p) {
    if (part == "..") return bad("a path escaping the model directory");
  }
  return OkStatus();
}
}  // namespace

StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open_index(
    const std::string& index_path) {
  ASSIGN_OR_RETURN(std::string text, read_text_file(index_path));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) return InvalidArgument(index_path + ": not valid JSON");
  if (!index.is_object()) return InvalidArgument(index_path + ": not a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    return InvalidArgument(index_path + ": missing object 'weight_map'");
  }
  if (wm->empty()) return InvalidArgument(index_path + ": 'weight_map' is empty");

  const std::filesystem::path dir = std::filesystem::path(index_path).parent_path();
  std::map<std::string, std::string> weight_map;  // tensor -> shard (relative)
  std::vector<std::string> shards;                // in first-seen order, each once
  std::set<std::string> shard_set;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return InvalidArgument(index_path + ": weight_map entry for " + in_quotes(it.key()) +
                             " is not a file name");
    }
    const std::string shard = it.value().get<std::string>();
    RETURN_IF_ERROR(check_shard_path(index_path, it.key(), shard));
    weight_map[it.key()] = shard;
    if (shard_set.insert(shard).second) shards.push_back(shard);
  }

  std::unique_ptr<SafetensorsCheckpoint> ck(new SafetensorsCheckpoint());
  std::map<std::string, size_t> shard_index;
  for (const auto& shard : shards) {
    const std::string path = (dir / shard).string();
    auto f = SafetensorsFile::open(path);
    if (!f.ok()) return f.status().with_context(index_path + ": shard " + in_quotes(shard));
    shard_index[shard] = ck->files_.size();
    RETURN_IF_ERROR(ck->add_file(std::move(f).value()));
  }
  for (const auto& [tensor, shard] : weight_map) {
    const SafetensorsFile& f = *ck->files_[shard_index[shard]];
    if (!f.find(tensor)) {
      return NotFound(index_path + ": tensor " + in_quotes(tensor) + " is listed in shard " +
                      f.path() + " but that file does not hold it");
    }
  }
  return ck;
}

const TensorView* SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::string SafetensorsCheckpoint::file_of(const std::string& name) const {
  auto it = file_index_.find(name);
  return it == file_index_.end() ? std::string() : files_[it->second]->path();
}

// ---- writer ----

namespace {
// Builds the padded header and the order in which tensor bytes follow it.
StatusOr<std::string> build_header(const std::vector<SafetensorsWriteTensor>& tensors,
                                   const std::map<std::string, std::string>& metadata,
                                   std::vector<size_t>* order) {
  order->resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) (*order)[i] = i;
  std::stable_sort(order->begin(), order->end(), [&](size_t a, size_t b) {
    return elem_bytes(tensors[a].dtype) > elem_bytes(tensors[b].dtype);
  });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : *order) {
    const auto& t = tensors[i];
    const char* dname = safetensors_dtype_name(t.dtype);
    if (!dname) {
      return InvalidArgument("safetensors writer: tensor " + in_quotes(t.name) + ": dtype " +
                             dtype_name(t.dtype) + " has no safetensors encoding");
    }
    if (t.name.empty() || t.name == "__metadata__" || header.contains(t.name)) {
      return InvalidArgument("safetensors writer: bad or duplicate tensor name " + in_quotes(t.name));
    }
    auto numel = checked_product(t.shape);
    uint64_t need = 0;
    if (!numel || !checked_mul(*numel, elem_bytes(t.dtype), &need) || need != t.nbytes ||
        (need > 0 && !t.data)) {
      return InvalidArgument("safetensors writer: tensor " + in_quotes(t.name) + ": " +
                             std::to_string(t.nbytes) + " bytes given for " + dname + " " +
                             shape_to_string(t.shape));
    }
    uint64_t end = 0;
    if (!checked_add(offset, need, &end)) return InvalidArgument("safetensors writer: too large");
    header[t.name] = {{"dtype", dname}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  // Pad with spaces so 8 + len is a multiple of 8: the data section starts aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
}  // namespace

StatusOr<std::string> serialize_safetensors(const std::vector<SafetensorsWriteTensor>& tensors,
                                            const std::map<std::string, std::string>& metadata) {
  std::vector<size_t> order;
  ASSIGN_OR_RETURN(std::string header, build_header(tensors, metadata, &order));
  std::string out = le64(header.size()) + header;
  for (size_t i : order) {
    out.append(static_cast<const char*>(tensors[i].data), tensors[i].nbytes);
  }
  return out;
}

Status write_safetensors(const std::string& path,
                         const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<size_t> order;
  ASSIGN_OR_RETURN(std::string header, build_header(tensors, metadata, &order));
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return IoError("cannot create " + tmp + ": " + std::strerror(errno));
  const std::string len = le64(header.size());
  bool ok = std::fwrite(len.data(), 1, len.size(), f) == len.size() &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (size_t i : order) {
    if (!ok) break;
    const auto& t = tensors[i];
    ok = t.nbytes == 0 || std::fwrite(t.data, 1, t.nbytes, f) == t.nbytes;
  }
  if (std::fclose(f) != 0) ok = false;
  if (!ok) {
    std::remove(tmp.c_str());
    return IoError("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return IoError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return OkStatus();
}

}  // namespace lancet
