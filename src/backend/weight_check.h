// The weight-spec checks every backend applies the same way before uploading a weight:
// 2-D, a supported format, whole blocks per row, enough bytes. Header-only so each backend
// library uses it without depending on the others.
#pragma once

#include <string>

#include "backend/backend.h"

namespace lancet {

inline bool backend_weight_dtype_supported(DType t) {
  switch (t) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kF8E4M3:
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ2_K: case DType::kQ3_K: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

// Returns the weight's bytes per row.
inline StatusOr<size_t> check_weight_spec(const WeightSpec& spec) {
  if (!spec.tensor) return InvalidArgument(spec.name + ": no tensor");
  const TensorView& t = *spec.tensor;
  if (t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0)
    return InvalidArgument(spec.name + ": weight must be 2-D, got " + shape_to_string(t.shape));
  if (!backend_weight_dtype_supported(t.dtype))
    return Unimplemented(spec.name + ": weight dtype " + dtype_name(t.dtype) + " not supported");
  const int64_t rows = t.shape[0], cols = t.shape[1];
  auto rb = dtype_row_bytes(t.dtype, static_cast<uint64_t>(cols));
  if (!rb)
    return InvalidArgument(spec.name + ": " + std::to_string(cols) + " columns is not a whole number of " +
                           dtype_name(t.dtype) + " blocks");
  if (!t.data || t.nbytes < *rb * static_cast<uint64_t>(rows))
    return InvalidArgument(spec.name + ": data holds " + std::to_string(t.nbytes) + " bytes, shape " +
                           shape_to_string(t.shape) + " needs " + std::to_string(*rb * rows));
  return static_cast<size_t>(*rb);
}

}  // namespace lancet
