// Tensor-parallel layouts and host slices of HF tensors (see tp_shard.h for the scheme).
#include "model/tp_shard.h"

#include <cassert>
#include <cstring>

namespace lancet {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status not_divisible(const char* field, int64_t value, int size) {
  return InvalidArgument(std::string("tensor parallel: ") + field + " (" + std::to_string(value) +
                         ") is not divisible by the tensor-parallel size " + std::to_string(size));
}

// Only plain element storage is sliced: a column slice of a GGUF block row would cut blocks.
Status check_2d_float(const TensorView& t, const std::string& name) {
  if (t.shape.size() != 2)
    return InvalidArgument("tensor parallel: " + name + " has shape " + shape_to_string(t.shape) +
                           ", expected a 2-D tensor");
  if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16 && t.dtype != DType::kF8E4M3 &&
      t.dtype != DType::kF8E5M2)
    return Unimplemented("tensor parallel: " + name + " is " + dtype_name(t.dtype) +
                         "; only F32/F16/BF16/FP8 tensors can be sharded");
  const uint64_t need = static_cast<uint64_t>(t.numel()) * dtype_info(t.dtype).block_bytes;
  if (t.nbytes < need || t.data == nullptr)
    return InvalidArgument("tensor parallel: " + name + " holds fewer bytes than its shape needs");
  return OkStatus();
}

}  // namespace

Status validate_tp_config(const ModelConfig& cfg, int size) {
  if (size < 1) return InvalidArgument("tensor parallel: size must be >= 1, got " + std::to_string(size));
  RETURN_IF_ERROR(cfg.validate());
  if (cfg.num_heads % size != 0) return not_divisible("num_heads", cfg.num_heads, size);
  // Fewer KV heads than ranks is fine when each KV head can be replicated on a whole group of
  // ranks (size a multiple of num_kv_heads); otherwise the heads must split evenly.
  if (cfg.num_kv_heads >= size ? cfg.num_kv_heads % size != 0 : size % cfg.num_kv_heads != 0)
    return InvalidArgument("tensor parallel: num_kv_heads (" + std::to_string(cfg.num_kv_heads) +
                           ") is not divisible by the tensor-parallel size " + std::to_string(size) +
                           " (nor does it divide it, which would let KV heads be replicated)");
  if (cfg.intermediate_size % size != 0) return not_divisible("intermediate_size", cfg.intermediate_size, size);
  if (cfg.vocab_size % size != 0) return not_divisible("vocab_size", cfg.vocab_size, size);
  return OkStatus();
}

StatusOr<TpRankLayout> tp_rank_layout(const ModelConfig& cfg, const TpShardSpec& spec) {
  RETURN_IF_ERROR(validate_tp_config(cfg, spec.size));
  if (spec.rank < 0 || spec.rank >= spec.size)
    return InvalidArgument("tensor parallel: rank " + std::to_string(spec.rank) + " outside [0, " +
                           std::to_string(spec.size) + ")");
  TpRankLayout l;
  l.num_heads = cfg.num_heads / spec.size;
  l.head_begin = spec.rank * l.num_heads;
  const int64_t group = cfg.num_heads / cfg.num_kv_heads;  // query heads per KV head
  if (cfg.num_kv_heads >= spec.size) {
    l.num_kv_heads = cfg.num_kv_heads / spec.size;
    l.kv_head_begin = spec.rank * l.num_kv_heads;
  } else {
    l.num_kv_heads = 1;
    l.kv_head_begin = l.head_begin / group;
  }
  // Every local query head must read a local KV head.
  assert(l.head_begin / group == l.kv_head_begin);
  assert((l.head_begin + l.num_heads - 1) / group < l.kv_head_begin + l.num_kv_heads);
  l.intermediate = cfg.intermediate_size / spec.size;
  l.intermediate_begin = spec.rank * l.intermediate;
  l.vocab = cfg.vocab_size / spec.size;
  l.vocab_begin = spec.rank * l.vocab;
  return l;
}

StatusOr<OwnedTensor> tp_slice_rows(const TensorView& t, int64_t begin, int64_t count, const std::string& name) {
  RETURN_IF_ERROR(check_2d_float(t, name));
  if (begin < 0 || count < 0 || begin + count > t.shape[0])
    return OutOfRange("tensor parallel: rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                      ") outside " + name + " " + shape_to_string(t.shape));
  const size_t row_bytes = static_cast<size_t>(t.shape[1]) * dtype_info(t.dtype).block_bytes;
  OwnedTensor o;
  o.dtype = t.dtype;
  o.shape = {count, t.shape[1]};
  o.bytes.resize(row_bytes * count);
  if (count) std::memcpy(o.bytes.data(), static_cast<const uint8_t*>(t.data) + row_bytes * begin, o.bytes.size());
  return o;
}

StatusOr<OwnedTensor> tp_slice_cols(const TensorView& t, int64_t begin, int64_t count, const std::string& name) {
  RETURN_IF_ERROR(check_2d_float(t, name));
  if (begin < 0 || count < 0 || begin + count > t.shape[1])
    return OutOfRange("tensor parallel: columns [" + std::to_string(begin) + ", " +
                      std::to_string(begin + count) + ") outside " + name + " " + shape_to_string(t.shape));
  const size_t es = dtype_info(t.dtype).block_bytes;
  const size_t src_row = static_cast<size_t>(t.shape[1]) * es, dst_row = static_cast<size_t>(count) * es;
  OwnedTensor o;
  o.dtype = t.dtype;
  o.shape = {t.shape[0], count};
  o.bytes.resize(dst_row * t.shape[0]);
  const uint8_t* s = static_cast<const uint8_t*>(t.data) + begin * es;
  for (int64_t r = 0; r < t.shape[0]; ++r) std::memcpy(o.bytes.data() + r * dst_row, s + r * src_row, dst_row);
  return o;
}

TpSlice tp_slice_of(const std::string& n, const ModelConfig& c, const TpRankLayout& l) {
  const int64_t D = c.head_dim;
  if (ends_with(n, "q_proj.weight")) return {TpSplit::kRows, l.head_begin * D, l.num_heads * D};
  if (ends_with(n, "k_proj.weight") || ends_with(n, "v_proj.weight"))
    return {TpSplit::kRows, l.kv_head_begin * D, l.num_kv_heads * D};
  if (ends_with(n, "gate_proj.weight") || ends_with(n, "up_proj.weight"))
    return {TpSplit::kRows, l.intermediate_begin, l.intermediate};
  if (n == "model.embed_tokens.weight" || n == "lm_head.weight") return {TpSplit::kRows, l.vocab_begin, l.vocab};
  if (ends_with(n, "o_proj.weight")) return {TpSplit::kCols, l.head_begin * D, l.num_heads * D};
  if (ends_with(n, "down_proj.weight")) return {TpSplit::kCols, l.intermediate_begin, l.intermediate};
  return {};
}

StatusOr<OwnedTensor> tp_slice_scale_rows(const TensorView& t, int64_t begin, int64_t count, const std::string& name) {
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  if ((t.dtype != DType::kF32 && t.dtype != DType::kBF16) || t.numel() != rows)
    return InvalidArgument("tensor parallel: " + name + " must be a per-row f32/bf16 scale, got " +
                           dtype_name(t.dtype) + " " + shape_to_string(t.shape));
  if (begin < 0 || count < 0 || begin + count > rows)
    return OutOfRange("tensor parallel: rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                      ") outside " + name + " " + shape_to_string(t.shape));
  const size_t es = dtype_info(t.dtype).block_bytes;
  if (t.nbytes < es * static_cast<size_t>(rows) || t.data == nullptr)
    return InvalidArgument("tensor parallel: " + name + " holds fewer bytes than its shape needs");
  OwnedTensor o;
  o.dtype = t.dtype;
  o.shape = t.shape.size() == 2 ? std::vector<int64_t>{count, 1} : std::vector<int64_t>{count};
  o.bytes.resize(es * count);
  if (count) std::memcpy(o.bytes.data(), static_cast<const uint8_t*>(t.data) + es * begin, o.bytes.size());
  return o;
}

}  // namespace lancet
