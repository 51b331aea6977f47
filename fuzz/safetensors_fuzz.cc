// libFuzzer target for the safetensors parser: any input must parse or fail with a Status,
// and a parsed file's every tensor byte must be readable (ASan catches a view that points
// outside the input). Accepted files are re-serialized with the writer and parsed again,
// which must reproduce the same tensors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = lancet::parse_safetensors_buffer(data, size, "fuzz.safetensors");
  if (!parsed.ok()) return 0;
  volatile uint64_t sink = 0;
  std::vector<lancet::SafetensorsWriteTensor> out;
  for (const auto& [name, t] : parsed->tensors) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    uint64_t h = 0;
    for (uint64_t i = 0; i < t.nbytes; ++i) h = h * 31 + p[i];
    sink = sink + h + static_cast<uint64_t>(t.numel()) + t.shape.size();
    out.push_back({name, t.dtype, t.shape, t.data, t.nbytes});
  }
  for (const auto& [k, v] : parsed->metadata) sink = sink + k.size() + v.size();

  // Round trip: what the parser accepts, the writer must write and the parser re-read.
  auto bytes = lancet::serialize_safetensors(out, parsed->metadata);
  if (!bytes.ok()) std::abort();
  auto again = lancet::parse_safetensors_buffer(
      reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), "fuzz.roundtrip");
  if (!again.ok() || again->tensors.size() != parsed->tensors.size() ||
      again->metadata != parsed->metadata) {
    std::abort();
  }
  for (const auto& [name, t] : parsed->tensors) {
    const auto& u = again->tensors.at(name);
    if (u.dtype != t.dtype || u.shape != t.shape || u.nbytes != t.nbytes ||
        (t.nbytes && std::memcmp(u.data, t.data, t.nbytes) != 0)) {
      std::abort();
    }
  }
  (void)sink;
  return 0;
}
