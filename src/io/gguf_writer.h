// GGUF v3 writer: metadata of every type (arrays included), tensor infos, alignment padding
// and tensor data. Tensor bytes may be given up front or produced when the data section is
// written (a fill callback), so a converter can stream a large model one tensor at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "io/gguf.h"

namespace lancet {

class GgufWriter {
 public:
  // Fills exactly `nbytes` bytes of one tensor's data.
  using FillFn = std::function<Status(uint8_t* dst, uint64_t nbytes)>;

  explicit GgufWriter(uint64_t alignment = kGgufDefaultAlignment) : alignment_(alignment) {}

  // Metadata, written in the order added. A duplicate key or an array whose elements do not
  // all have its element type is reported by write().
  void add(const std::string& key, GgufValue value);

  // A tensor of row-major `shape` (shape.back() is contiguous; written as ggml ne[] reversed).
  // `data` must hold exactly the tensor's bytes for `dtype`.
  Status add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                    std::vector<uint8_t> data);
  // Same, with the bytes produced by `fill` during write().
  Status add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                    FillFn fill);

  // Writes the file (to a temporary name, renamed into place on success). `general.alignment`
  // is added when the alignment is not the default and the key was not given.
  Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes;
    std::vector<uint8_t> data;
    FillFn fill;
  };
  Status check_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                      uint64_t* nbytes) const;

  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace lancet
