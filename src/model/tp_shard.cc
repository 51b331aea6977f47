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

// Only plain float storage is sliced: a column slice of a GGUF block row would cut blocks.
Status check_2d_float(const TensorView& t, const std::string& name) {
  if (t.shape.size() != 2)
    return InvalidArgument("tensor parallel: " + name + " has shape " + shape_to_string(t.shape) +
                           ", expected a 2-D tensor");
  if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16)
    return Unimplemented("tensor parallel: " + name + " is " + dtype_name(t.dtype) +
                         "; only F32/F16/BF16 tensors can be sharded");
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

StatusOr<TpOwnedTensor> tp_slice_rows(const TensorView& t, int64_t begin, int64_t count, const std::string& name) {
  RETURN_IF_ERROR(check_2d_float(t, name));
  if (begin < 0 || count < 0 || begin + count > t.shape[0])
    return OutOfRange("tensor parallel: rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                      ") outside " + name + " " + shape_to_string(t.shape));
  const size_t row_bytes = static_cast<size_t>(t.shape[1]) * dtype_info(t.dtype).block_bytes;
  TpOwnedTensor o;
  o.dtype = t.dtype;
  o.shape = {count, t.shape[1]};
  o.bytes.resize(row_bytes * count);
  if (count) std::memcpy(o.bytes.data(), static_cast<const uint8_t*>(t.data) + row_bytes * begin, o.bytes.size());
  return o;
}

StatusOr<TpOwnedTensor> tp_slice_cols(const TensorView& t, int64_t begin, int64_t count, const std::string& name) {
  RETURN_IF_ERROR(check_2d_float(t, name));
  if (begin < 0 || count < 0 || begin + count > t.shape[1])
    return OutOfRange("tensor parallel: columns [" + std::to_string(begin) + ", " +
                      std::to_string(begin + count) + ") outside " + name + " " + shape_to_string(t.shape));
  const size_t es = dtype_info(t.dtype).block_bytes;
  const size_t src_row = static_cast<size_t>(t.shape[1]) * es, dst_row = static_cast<size_t>(count) * es;
  TpOwnedTensor o;
  o.dtype = t.dtype;
  o.shape = {t.shape[0], count};
  o.bytes.resize(dst_row * t.shape[0]);
  const uint8_t* s = static_cast<const uint8_t*>(t.data) + begin * es;
  for (int64_t r = 0; r < t.shape[0]; ++r) std::memcpy(o.bytes.data() + r * dst_row, s + r * src_row, dst_row);
  return o;
}

TpSplit tp_split_of(const std::string& n) {
  if (ends_with(n, "q_proj.weight") || ends_with(n, "k_proj.weight") || ends_with(n, "v_proj.weight") ||
      ends_with(n, "gate_proj.weight") || ends_with(n, "up_proj.weight") || n == "model.embed_tokens.weight" ||
      n == "lm_head.weight")
    return TpSplit::kRows;
  if (ends_with(n, "o_proj.weight") || ends_with(n, "down_proj.weight")) return TpSplit::kCols;
  return TpSplit::kReplicated;
}

StatusOr<TpOwnedTensor> tp_shard_tensor(const ModelSource& src, const std::string& n, const TpRankLayout& l) {
  const ModelConfig& c = src.config();
  const TensorView* t = src.find(n);
  if (!t) return NotFound(src.path() + ": missing tensor " + n);
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  int64_t rows = 0, cols = 0, begin = 0, count = 0;
  bool by_rows = true;
  if (ends_with(n, "q_proj.weight")) {
    rows = c.num_heads * D, cols = H, begin = l.head_begin * D, count = l.num_heads * D;
  } else if (ends_with(n, "k_proj.weight") || ends_with(n, "v_proj.weight")) {
    rows = c.num_kv_heads * D, cols = H, begin = l.kv_head_begin * D, count = l.num_kv_heads * D;
  } else if (ends_with(n, "gate_proj.weight") || ends_with(n, "up_proj.weight")) {
    rows = I, cols = H, begin = l.intermediate_begin, count = l.intermediate;
  } else if (n == "model.embed_tokens.weight" || n == "lm_head.weight") {
    rows = c.vocab_size, cols = H, begin = l.vocab_begin, count = l.vocab;
  } else if (ends_with(n, "o_proj.weight")) {
    rows = H, cols = c.num_heads * D, begin = l.head_begin * D, count = l.num_heads * D, by_rows = false;
  } else if (ends_with(n, "down_proj.weight")) {
    rows = H, cols = I, begin = l.intermediate_begin, count = l.intermediate, by_rows = false;
  } else {
    return InvalidArgument("tensor parallel: " + n + " is not a sharded tensor (norms are replicated)");
  }
  if (t->shape.size() != 2 || t->shape[0] != rows || t->shape[1] != cols)
    return InvalidArgument(src.path() + ": tensor " + n + " has shape " + shape_to_string(t->shape) +
                           ", expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  auto r = by_rows ? tp_slice_rows(*t, begin, count, n) : tp_slice_cols(*t, begin, count, n);
  if (!r.ok()) return r.status().with_context(src.path());
  return r;
}

}  // namespace lancet
