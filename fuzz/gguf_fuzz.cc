// libFuzzer target for the GGUF parser: any input must parse or fail with a Status, and a
// parsed file's every metadata value and tensor byte must be readable (ASan catches a view
// that points outside the input). Dequantizes the first block of each quantized tensor too.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/gguf.h"
#include "quant/gguf_blocks.h"

namespace {

uint64_t touch_value(const lancet::GgufValue& v) {
  uint64_t h = static_cast<uint64_t>(v.type);
  h ^= lancet::gguf_value_to_string(v).size();
  if (v.type == lancet::GgufType::kString) {
    for (char c : v.as_string()) h = h * 31 + static_cast<uint8_t>(c);
  } else if (v.type == lancet::GgufType::kArray) {
    for (const lancet::GgufValue& e : v.as_array()) h = h * 7 + touch_value(e);
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = lancet::parse_gguf_buffer(data, size, "fuzz.gguf");
  if (!f.ok()) return 0;
  volatile uint64_t sink = 0;
  for (const auto& [key, value] : (*f)->metadata()) {
    sink = sink + key.size() + touch_value(value);
    (void)(*f)->get_u32(key);
    (void)(*f)->get_f32(key);
    (void)(*f)->get_string_array(key);
    (void)(*f)->get_int_array(key);
  }
  std::vector<float> block;
  for (const lancet::GgufTensor& t : (*f)->tensors()) {
    uint64_t h = 0;
    for (uint64_t i = 0; i < t.nbytes; ++i) h += t.data[i];
    sink = sink + h;
    const lancet::DTypeInfo& info = lancet::dtype_info(t.dtype);
    if (info.is_quantized && t.nbytes >= info.block_bytes) {
      block.resize(info.block_elems);
      (void)lancet::dequantize_row(t.dtype, t.data, block.data(), info.block_elems);
    }
  }
  return 0;
}
