// The KV buffers of one rank: per layer, K and V of [num_blocks, block_size, num_kv_heads,
// head_dim] in backend memory. Buffers only: which blocks a sequence owns is decided by the
// block allocator of src/kv (kv/kv_cache_manager.h), whose block ids index these buffers.
// An FP8 (E4M3) cache also holds per-layer K and V scales; it starts without them, and the
// runner refuses to run on it until they are set (from the checkpoint or a calibration,
// runner/kv_calibration.h), so a scale can never silently stay 1.0.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/kv_block_config.h"
#include "core/status.h"

namespace lancet {

struct KvBufferConfig : KvBlockConfig {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;  // this rank's KV heads
  int64_t head_dim = 0;
  DType dtype = DType::kF32;  // kF32, kBF16 or kF8E4M3
};

// Bytes of one K or V element of a cache of this dtype (4, 2 or 1); 0 if unsupported.
int64_t kv_cache_element_bytes(DType dtype);

// The calibration hook of LlamaModel (set_kv_observer): per-layer running absmax of the K
// (after rope) and V rows a forward pass writes to the cache. Host-side; the model copies
// each layer's rows out only while an observer is attached.
struct KvAbsmaxObserver {
  std::vector<float> k_absmax;  // [num_layers]
  std::vector<float> v_absmax;  // [num_layers]
  int64_t tokens = 0;           // rows seen by layer 0
  bool saw_non_finite = false;  // a NaN/inf in K or V (the scales would be meaningless)
  void observe(int64_t layer, const float* k /*[n]*/, const float* v /*[n]*/, int64_t n, int64_t rows);
};

class KvBuffers {
 public:
  static StatusOr<std::unique_ptr<KvBuffers>> create(Backend& backend, const KvBufferConfig& cfg);

  const KvBufferConfig& config() const { return cfg_; }
  const KvCacheLayer& layer(int64_t i) const { return layers_[i]; }
  int32_t block_size() const { return cfg_.block_size; }
  int64_t num_blocks() const { return cfg_.num_blocks; }

  // FP8 caches: per-layer scales (stored = e4m3(x / scale)), one entry per layer, each
  // finite and positive. Other dtypes accept and ignore them.
  Status set_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales);
  // True when the dtype needs no scales or set_scales succeeded.
  bool has_scales() const { return cfg_.dtype != DType::kF8E4M3 || scales_set_; }

 private:
  KvBuffers() = default;
  KvBufferConfig cfg_;
  std::vector<Buffer> buffers_;
  std::vector<KvCacheLayer> layers_;
  bool scales_set_ = false;
};

}  // namespace lancet
