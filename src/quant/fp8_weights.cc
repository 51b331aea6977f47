// The FP8 checkpoint's tensor policy and the conversions it needs (any weight -> f32 / bf16 /
// per-channel FP8).
#include "quant/fp8_weights.h"

#include <atomic>
#include <cstring>
#include <regex>

#include "core/thread_pool.h"
#include "quant/gguf_blocks.h"

namespace lancet {

bool fp8_quantizes_tensor(const std::string& name) {
  static const std::regex kLinear(
      R"(model\.layers\.[0-9]+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight)");
  return std::regex_match(name, kLinear);
}

StatusOr<std::vector<float>> tensor_to_f32(const TensorView& t, const std::string& name) {
  const int64_t n = t.numel();
  if (n < 0) return InvalidArgument("tensor '" + name + "' has a negative dimension");
  const int64_t cols = t.cols(), rows = t.rows();
  auto row_bytes = dtype_row_bytes(t.dtype, static_cast<uint64_t>(cols));
  if (!row_bytes || *row_bytes * static_cast<uint64_t>(rows) > t.nbytes)
    return InvalidArgument("tensor '" + name + "': " + std::to_string(t.nbytes) + " bytes do not hold " +
                           dtype_name(t.dtype) + " " + shape_to_string(t.shape));
  std::vector<float> out(static_cast<size_t>(n));
  const uint8_t* src = static_cast<const uint8_t*>(t.data);
  std::atomic<bool> failed{false};
  Status first_error;
  std::atomic_flag error_taken = ATOMIC_FLAG_INIT;
  default_thread_pool().parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1 && !failed.load(); ++r) {
      Status st = dequantize_row(t.dtype, src + r * *row_bytes, out.data() + r * cols, cols);
      if (!st.ok()) {
        failed.store(true);
        if (!error_taken.test_and_set()) first_error = st;
      }
    }
  }, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)));
  if (failed.load()) return first_error.with_context("tensor '" + name + "'");
  return out;
}

StatusOr<OwnedTensor> tensor_to_bf16(const TensorView& t, const std::string& name) {
  OwnedTensor o;
  o.dtype = DType::kBF16;
  o.shape = t.shape;
  o.bytes.resize(static_cast<size_t>(t.numel()) * 2);
  if (t.dtype == DType::kBF16) {
    std::memcpy(o.bytes.data(), t.data, o.bytes.size());
    return o;
  }
  ASSIGN_OR_RETURN(std::vector<float> f, tensor_to_f32(t, name));
  uint16_t* dst = reinterpret_cast<uint16_t*>(o.bytes.data());
  for (size_t i = 0; i < f.size(); ++i) dst[i] = f32_to_bf16(f[i]);
  return o;
}

StatusOr<Fp8Weight> quantize_weight_fp8(const TensorView& t, const std::string& name,
                                        const Fp8QuantizeOptions& opts, const Fp8GptqFactor* gptq) {
  if (t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0)
    return InvalidArgument("tensor '" + name + "': FP8 quantization needs a 2-D weight, got " +
                           shape_to_string(t.shape));
  if (t.dtype == DType::kF8E4M3 || t.dtype == DType::kF8E5M2)
    return InvalidArgument("tensor '" + name + "' is already FP8 (" + dtype_name(t.dtype) + ")");
  const int64_t rows = t.shape[0], cols = t.shape[1];
  ASSIGN_OR_RETURN(std::vector<float> f, tensor_to_f32(t, name));
  Fp8Weight w;
  w.weight.dtype = DType::kF8E4M3;
  w.weight.shape = {rows, cols};
  w.weight.bytes.resize(static_cast<size_t>(rows * cols));
  std::vector<float> scales(static_cast<size_t>(rows));
  if (gptq) {
    RETURN_IF_ERROR(quantize_fp8_gptq(f.data(), rows, cols, *gptq, name, w.weight.bytes.data(), scales.data(), opts));
  } else {
    RETURN_IF_ERROR(quantize_fp8_per_channel(f.data(), rows, cols, name, w.weight.bytes.data(), scales.data(), opts));
  }
  w.scale.shape = {rows, 1};
  if (opts.scale_dtype == Fp8ScaleDType::kBF16) {
    w.scale.dtype = DType::kBF16;
    w.scale.bytes.resize(static_cast<size_t>(rows) * 2);
    uint16_t* dst = reinterpret_cast<uint16_t*>(w.scale.bytes.data());
    for (int64_t r = 0; r < rows; ++r) dst[r] = f32_to_bf16(scales[r]);  // exact: already bf16 values
  } else {
    w.scale.dtype = DType::kF32;
    w.scale.bytes.resize(static_cast<size_t>(rows) * 4);
    std::memcpy(w.scale.bytes.data(), scales.data(), w.scale.bytes.size());
  }
  return w;
}

StatusOr<std::optional<OwnedTensor>> fp8_kept_tensor(const TensorView& t, const std::string& name) {
  if (t.dtype == DType::kF16 || t.dtype == DType::kBF16) return std::optional<OwnedTensor>();
  if (t.shape.size() <= 1) {
    if (t.dtype == DType::kF32) return std::optional<OwnedTensor>();
    OwnedTensor o;
    o.dtype = DType::kF32;
    o.shape = t.shape;
    ASSIGN_OR_RETURN(std::vector<float> f, tensor_to_f32(t, name));
    o.bytes.resize(f.size() * 4);
    std::memcpy(o.bytes.data(), f.data(), o.bytes.size());
    return std::optional<OwnedTensor>(std::move(o));
  }
  ASSIGN_OR_RETURN(OwnedTensor b, tensor_to_bf16(t, name));
  return std::optional<OwnedTensor>(std::move(b));
}

}  // namespace lancet
