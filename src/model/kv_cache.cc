// PagedKvCache: allocation of the per-layer cache buffers and a free-list block allocator.
#include "model/kv_cache.h"

#include <string>

#include "core/checked_math.h"

namespace lancet {

StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::create(Backend& backend, const KvCacheConfig& cfg) {
  if (cfg.num_layers <= 0 || cfg.num_kv_heads <= 0 || cfg.head_dim <= 0 || cfg.block_size <= 0 ||
      cfg.num_blocks <= 0)
    return InvalidArgument("kv cache: every dimension must be positive");
  if (cfg.dtype != DType::kF32 && cfg.dtype != DType::kBF16)
    return Unimplemented(std::string("kv cache: dtype ") + dtype_name(cfg.dtype) + " (f32 or bf16)");
  const uint64_t elem = cfg.dtype == DType::kF32 ? 4 : 2;
  const double bytes = static_cast<double>(cfg.num_blocks) * cfg.block_size * cfg.num_kv_heads *
                       cfg.head_dim * elem;
  if (bytes > 1e15) return InvalidArgument("kv cache: size overflows");
  const size_t per = static_cast<size_t>(bytes);
  std::unique_ptr<PagedKvCache> c(new PagedKvCache());
  c->cfg_ = cfg;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    ASSIGN_OR_RETURN(Buffer k, backend.alloc(per));
    ASSIGN_OR_RETURN(Buffer v, backend.alloc(per));
    RETURN_IF_ERROR(backend.zero(k.data(), per));
    RETURN_IF_ERROR(backend.zero(v.data(), per));
    KvCacheLayer layer;
    layer.dtype = cfg.dtype;
    layer.num_blocks = cfg.num_blocks;
    layer.block_size = cfg.block_size;
    layer.num_kv_heads = cfg.num_kv_heads;
    layer.head_dim = cfg.head_dim;
    layer.k = k.data();
    layer.v = v.data();
    c->layers_.push_back(layer);
    c->buffers_.push_back(std::move(k));
    c->buffers_.push_back(std::move(v));
  }
  // Hand out low block ids first.
  for (int64_t b = cfg.num_blocks - 1; b >= 0; --b) c->free_.push_back(static_cast<int32_t>(b));
  return c;
}

int64_t PagedKvCache::add_sequence() {
  const int64_t id = next_seq_++;
  tables_[id];
  return id;
}

void PagedKvCache::free_sequence(int64_t seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (int32_t b : it->second) free_.push_back(b);
  tables_.erase(it);
}

Status PagedKvCache::reserve(int64_t seq, int64_t num_tokens) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return NotFound("kv cache: unknown sequence " + std::to_string(seq));
  const int64_t need = (num_tokens + cfg_.block_size - 1) / cfg_.block_size;
  const int64_t have = static_cast<int64_t>(it->second.size());
  if (need <= have) return OkStatus();
  if (need - have > free_blocks())
    return ResourceExhausted("kv cache: sequence needs " + std::to_string(need - have) + " more blocks, " +
                             std::to_string(free_blocks()) + " free");
  for (int64_t i = have; i < need; ++i) {
    it->second.push_back(free_.back());
    free_.pop_back();
  }
  return OkStatus();
}

StatusOr<const std::vector<int32_t>*> PagedKvCache::block_table(int64_t seq) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return NotFound("kv cache: unknown sequence " + std::to_string(seq));
  return &it->second;
}

}  // namespace lancet
