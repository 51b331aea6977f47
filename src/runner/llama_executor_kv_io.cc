// LlamaExecutor's KV block copies for the shared KV tier: every rank's share of one block
// (its KV heads of every layer), rank after rank, through the rank's backend
// (Backend::kv_block_read / kv_block_write).
#include "runner/llama_executor.h"

#include <cstring>

#include "core/sha256.h"

namespace lancet {
namespace {

uint32_t layout_dtype_code(DType d) {
  switch (d) {
    case DType::kF32: return 1;
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 3;
    default: return 0;
  }
}

std::vector<KvCacheLayer> rank_layers(const KvBuffers& kv) {
  std::vector<KvCacheLayer> layers;
  for (int64_t l = 0; l < kv.config().num_layers; ++l) layers.push_back(kv.layer(l));
  return layers;
}

}  // namespace

KvBlockLayout LlamaExecutor::kv_block_layout() const {
  KvBlockLayout out;
  if (kv_.empty()) return out;
  const KvBufferConfig& c = kv_[0]->config();
  out.num_layers = static_cast<uint32_t>(c.num_layers);
  out.head_dim = static_cast<uint32_t>(c.head_dim);
  out.block_size = static_cast<uint32_t>(c.block_size);
  out.dtype_code = layout_dtype_code(c.dtype);
  out.element_bytes = static_cast<uint32_t>(kv_cache_element_bytes(c.dtype));
  out.num_ranks = static_cast<uint32_t>(kv_.size());
  for (const auto& kv : kv_) out.num_kv_heads += static_cast<uint32_t>(kv->config().num_kv_heads);
  if (c.dtype == DType::kF8E4M3) {
    // FP8 blocks mean something only under the scales they were stored with.
    Sha256 h;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const float s[2] = {kv_[0]->layer(l).k_scale, kv_[0]->layer(l).v_scale};
      h.update(s, sizeof s);
    }
    const Sha256Digest d = h.finish();
    std::memcpy(&out.scales_digest, d.data(), sizeof out.scales_digest);
  }
  return out;
}

namespace {

// Every rank's share of one block, rank after rank: copy(be, layers, offset) moves one rank's
// share at that offset of the host buffer.
template <typename Copy>
Status for_each_rank_share(LlamaModel& model, const std::vector<std::unique_ptr<KvBuffers>>& kv, BlockId block,
                           Copy&& copy) {
  size_t at = 0;
  for (size_t r = 0; r < kv.size(); ++r) {
    Backend& be = model.backend(static_cast<int>(r));
    RETURN_IF_ERROR(be.make_current());
    const std::vector<KvCacheLayer> layers = rank_layers(*kv[r]);
    ASSIGN_OR_RETURN(const size_t bytes, kv_block_host_bytes(layers, block));
    RETURN_IF_ERROR(copy(be, layers, at));
    at += 2 * bytes * layers.size();
  }
  return model.backend(0).make_current();
}

}  // namespace

Status LlamaExecutor::read_kv_block(BlockId block, std::span<uint8_t> out) {
  const KvBlockLayout layout = kv_block_layout();
  if (static_cast<int64_t>(out.size()) != layout.payload_bytes())
    return InvalidArgument("read_kv_block: " + std::to_string(out.size()) + " bytes for a block of " +
                           std::to_string(layout.payload_bytes()));
  return for_each_rank_share(model_, kv_, block, [&](Backend& be, const std::vector<KvCacheLayer>& layers, size_t at) {
    return be.kv_block_read(layers, block, out.data() + at);
  });
}

Status LlamaExecutor::write_kv_block(BlockId block, std::span<const uint8_t> in) {
  const KvBlockLayout layout = kv_block_layout();
  if (static_cast<int64_t>(in.size()) != layout.payload_bytes())
    return InvalidArgument("write_kv_block: " + std::to_string(in.size()) + " bytes for a block of " +
                           std::to_string(layout.payload_bytes()));
  return for_each_rank_share(model_, kv_, block, [&](Backend& be, const std::vector<KvCacheLayer>& layers, size_t at) {
    return be.kv_block_write(layers, block, in.data() + at);
  });
}

}  // namespace lancet
