// KvBuffers: allocation of the per-layer K/V buffers and their FP8 scales.
#include "model/kv_buffers.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/checked_math.h"

namespace lancet {

int64_t kv_cache_element_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 1;
    default: return 0;
  }
}

StatusOr<std::unique_ptr<KvBuffers>> KvBuffers::create(Backend& backend, const KvBufferConfig& cfg) {
  if (cfg.num_layers <= 0 || cfg.num_kv_heads <= 0 || cfg.head_dim <= 0 || cfg.block_size <= 0 ||
      cfg.num_blocks <= 0)
    return InvalidArgument("kv cache: every dimension must be positive");
  const int64_t elem = kv_cache_element_bytes(cfg.dtype);
  if (elem == 0)
    return Unimplemented(std::string("kv cache: dtype ") + dtype_name(cfg.dtype) + " (f32, bf16 or f8_e4m3)");
  const double bytes = static_cast<double>(cfg.num_blocks) * cfg.block_size * cfg.num_kv_heads *
                       cfg.head_dim * elem;
  if (bytes > 1e15) return InvalidArgument("kv cache: size overflows");
  const size_t per = static_cast<size_t>(bytes);
  std::unique_ptr<KvBuffers> c(new KvBuffers());
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
  return c;
}

void KvAbsmaxObserver::observe(int64_t layer, const float* k, const float* v, int64_t n, int64_t rows) {
  if (layer < 0) return;
  const auto l = static_cast<size_t>(layer);
  if (k_absmax.size() <= l) {
    k_absmax.resize(l + 1, 0.f);
    v_absmax.resize(l + 1, 0.f);
  }
  float km = k_absmax[l], vm = v_absmax[l];
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(k[i]), b = std::fabs(v[i]);
    if (!std::isfinite(a) || !std::isfinite(b)) {
      saw_non_finite = true;
      continue;
    }
    km = std::max(km, a);
    vm = std::max(vm, b);
  }
  k_absmax[l] = km;
  v_absmax[l] = vm;
  if (layer == 0) tokens += rows;
}

Status KvBuffers::set_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales) {
  const auto n = static_cast<size_t>(cfg_.num_layers);
  if (k_scales.size() != n || v_scales.size() != n)
    return InvalidArgument("kv cache: " + std::to_string(k_scales.size()) + " k and " +
                           std::to_string(v_scales.size()) + " v scales for " + std::to_string(n) + " layers");
  for (size_t l = 0; l < n; ++l)
    if (!(std::isfinite(k_scales[l]) && k_scales[l] > 0.f && std::isfinite(v_scales[l]) && v_scales[l] > 0.f))
      return InvalidArgument("kv cache: layer " + std::to_string(l) + " scales must be finite and positive (k " +
                             std::to_string(k_scales[l]) + ", v " + std::to_string(v_scales[l]) + ")");
  for (size_t l = 0; l < n; ++l) {
    layers_[l].k_scale = k_scales[l];
    layers_[l].v_scale = v_scales[l];
  }
  scales_set_ = true;
  return OkStatus();
}

}  // namespace lancet
