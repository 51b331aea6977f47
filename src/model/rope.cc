// Rope inverse frequencies and cos/sin tables, in HF's float32 arithmetic (see rope.h).
#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace lancet {

namespace {

// volatile-free float helpers: each op rounds to float32 like one torch elementwise op.
inline float f(double x) { return static_cast<float>(x); }

// HF `base ** (arange(0, dim, 2).float() / dim)`, then `1.0 / that` (reciprocal).
std::vector<float> pos_freqs(double base, int64_t dim) {
  std::vector<float> p(dim / 2);
  const float b = f(base);  // the python scalar becomes a float32 tensor element
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    p[i] = f(std::pow(static_cast<double>(b), static_cast<double>(e)));
  }
  return p;
}

std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> p = pos_freqs(base, dim);
  for (float& x : p) x = 1.0f / x;
  return p;
}

// Llama 3 scaling: long wavelengths divided by factor, short ones kept, a smooth ramp between.
StatusOr<RopeInvFreq> llama3_inv_freq(const ModelConfig& cfg, const RopeScaling& rs, int64_t dim) {
  RopeInvFreq out;
  if (!(rs.factor > 0) || rs.original_max_position_embeddings <= 0 ||
      !(rs.high_freq_factor > rs.low_freq_factor))
    return InvalidArgument("rope: llama3 scaling needs factor, original_max_position_embeddings and "
                           "high_freq_factor > low_freq_factor");
  const std::vector<float> inv = default_inv_freq(cfg.rope_theta, dim);
  const float factor = f(rs.factor);
  const double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
  const float low_wavelen = f(old_ctx / rs.low_freq_factor);
  const float high_wavelen = f(old_ctx / rs.high_freq_factor);
  out.inv_freq.resize(inv.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    const float wavelen = (1.0f / inv[i]) * f(2 * M_PI);
    float v = wavelen > low_wavelen ? inv[i] / factor : inv[i];
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      const float smooth = ((1.0f / wavelen) * f(old_ctx) - f(rs.low_freq_factor)) /
                           f(rs.high_freq_factor - rs.low_freq_factor);
      v = ((1.0f - smooth) * v) / factor + smooth * v;
    }
    out.inv_freq[i] = v;
  }
  return out;
}

// YaRN: interpolation and extrapolation blended by a linear ramp over the dimensions, and the
// attention factor.
StatusOr<RopeInvFreq> yarn_inv_freq(const ModelConfig& cfg, const RopeScaling& rs, int64_t dim) {
  RopeInvFreq out;
  if (!(rs.factor > 0)) return InvalidArgument("rope: yarn scaling needs factor > 0");
  const double factor = rs.factor;
  const int64_t orig = rs.original_max_position_embeddings > 0 ? rs.original_max_position_embeddings
                                                               : cfg.max_position_embeddings;
  if (orig <= 0) return InvalidArgument("rope: yarn needs original_max_position_embeddings");
  auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  double attn = rs.attention_factor;
  if (attn <= 0) {
    attn = (rs.mscale != 0 && rs.mscale_all_dim != 0)
               ? get_mscale(factor, rs.mscale) / get_mscale(factor, rs.mscale_all_dim)
               : get_mscale(factor, 1.0);
  }
  const double beta_fast = rs.beta_fast != 0 ? rs.beta_fast : 32.0;
  const double beta_slow = rs.beta_slow != 0 ? rs.beta_slow : 1.0;
  const double base = cfg.rope_theta;
  auto correction_dim = [&](double rot) {
    return (dim * std::log(orig / (rot * 2 * M_PI))) / (2 * std::log(base));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (rs.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // HF: prevent a zero-width ramp
  const std::vector<float> pf = pos_freqs(base, dim);
  out.inv_freq.resize(pf.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    const float extrap = 1.0f / pf[i];
    const float interp = 1.0f / (f(factor) * pf[i]);
    float ramp = (static_cast<float>(i) - f(low)) / f(high - low);
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    const float extrap_factor = 1.0f - ramp;
    out.inv_freq[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  out.attention_factor = f(attn);
  return out;
}

}  // namespace

StatusOr<RopeInvFreq> compute_rope_inv_freq(const ModelConfig& cfg, int64_t seq_len,
                                            const float* freq_factors) {
  const int64_t dim = cfg.head_dim;
  if (dim <= 0 || dim % 2 != 0) return InvalidArgument("rope: head_dim must be positive and even");
  if (cfg.rope_theta <= 0) return InvalidArgument("rope: rope_theta must be positive");
  const RopeScaling& rs = cfg.rope_scaling;
  RopeInvFreq out;
  if (freq_factors) {
    out.inv_freq = default_inv_freq(cfg.rope_theta, dim);
    for (int64_t i = 0; i < dim / 2; ++i) {
      if (!(freq_factors[i] > 0)) return InvalidArgument("rope: rope_freqs values must be positive");
      out.inv_freq[i] = out.inv_freq[i] / freq_factors[i];
    }
    return out;
  }
  switch (rs.type) {
    case RopeType::kDefault:
      out.inv_freq = default_inv_freq(cfg.rope_theta, dim);
      return out;
    case RopeType::kLinear: {
      if (!(rs.factor > 0)) return InvalidArgument("rope: linear scaling needs factor > 0");
      out.inv_freq = default_inv_freq(cfg.rope_theta, dim);
      for (float& x : out.inv_freq) x = x / f(rs.factor);
      return out;
    }
    case RopeType::kDynamic: {
      if (!(rs.factor > 0)) return InvalidArgument("rope: dynamic scaling needs factor > 0");
      const int64_t orig = rs.original_max_position_embeddings > 0 ? rs.original_max_position_embeddings
                                                                   : cfg.max_position_embeddings;
      double base = cfg.rope_theta;
      if (orig > 0 && seq_len > orig) {
        base = base * std::pow(rs.factor * static_cast<double>(seq_len) / orig - (rs.factor - 1),
                               static_cast<double>(dim) / (dim - 2));
      }
      out.inv_freq = default_inv_freq(base, dim);
      return out;
    }
    case RopeType::kLlama3:
      return llama3_inv_freq(cfg, rs, dim);
    case RopeType::kYarn:
      return yarn_inv_freq(cfg, rs, dim);
  }
  return Unimplemented(std::string("rope: type ") + rope_type_name(rs.type));
}

StatusOr<RopeTable> build_rope_table(const ModelConfig& cfg, int64_t max_positions,
                                     const float* freq_factors, DType inv_freq_dtype) {
  if (max_positions <= 0) return InvalidArgument("rope: max_positions must be positive");
  ASSIGN_OR_RETURN(RopeInvFreq iv, compute_rope_inv_freq(cfg, max_positions, freq_factors));
  for (float& x : iv.inv_freq) {
    if (inv_freq_dtype == DType::kBF16) x = bf16_to_f32(f32_to_bf16(x));
    else if (inv_freq_dtype == DType::kF16) x = f16_to_f32(f32_to_f16(x));
    else if (inv_freq_dtype != DType::kF32) return InvalidArgument("rope: inv_freq dtype must be f32, bf16 or f16");
  }
  RopeTable t;
  t.max_positions = max_positions;
  t.rotary_dim = cfg.head_dim;
  t.attention_factor = iv.attention_factor;
  const int64_t half = t.rotary_dim / 2;
  t.cos.resize(max_positions * half);
  t.sin.resize(max_positions * half);
  for (int64_t p = 0; p < max_positions; ++p) {
    const float pf = static_cast<float>(p);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pf * iv.inv_freq[i];  // float32 product, as HF's matmul
      float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      if (iv.attention_factor != 1.f) {
        c = c * iv.attention_factor;
        s = s * iv.attention_factor;
      }
      t.cos[p * half + i] = c;
      t.sin[p * half + i] = s;
    }
  }
  t.inv_freq = std::move(iv.inv_freq);
  return t;
}

}  // namespace lancet
