// Non-owning views of tensor memory (mmapped weights, activations). Shapes are row-major with
// the last dim contiguous, as in safetensors and PyTorch; for GGUF the loader reverses ggml's
// ne[] order so shape[0] is the number of rows everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace lancet {

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major, last dim contiguous
  const void* data = nullptr;
  uint64_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 1 : numel() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
};

std::string shape_to_string(const std::vector<int64_t>& shape);  // "[4096, 14336]"

}  // namespace lancet
