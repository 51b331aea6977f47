// Element types of tensors and their scalar conversions.
// bf16/fp16/fp8 conversions round to nearest even; fp8 follows the OCP FP8 spec (E4M3FN has no
// infinity and one NaN pattern per sign, max 448; E5M2 is IEEE-like, max 57344). The
// saturating mode (the one checkpoints and kernels use) clamps overflow and infinity to the
// largest finite value; NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace lancet {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kF64,
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
  // GGUF block-quantized formats: a row is a whole number of blocks.
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
};

struct DTypeInfo {
  const char* name;        // "f32", "bf16", "q4_k", ...
  uint32_t block_elems;    // elements per block (1 for plain types)
  uint32_t block_bytes;    // bytes per block
  bool is_float;           // plain floating point
  bool is_quantized;       // GGUF block format
};

const DTypeInfo& dtype_info(DType t);
inline const char* dtype_name(DType t) { return dtype_info(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);  // inverse of dtype_name
// Bytes for n elements (n must be a multiple of block_elems); nullopt on overflow or misfit.
std::optional<uint64_t> dtype_row_bytes(DType t, uint64_t n);

// ---- scalar conversions ----
inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // IEEE binary16, RNE, overflow -> inf

float fp8e4m3_to_f32(uint8_t v);
float fp8e5m2_to_f32(uint8_t v);
// saturate=true: |x| beyond max finite (and +-inf) -> +-max; false: -> NaN (E4M3) / inf (E5M2).
uint8_t f32_to_fp8e4m3(float f, bool saturate = true);
uint8_t f32_to_fp8e5m2(float f, bool saturate = true);

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;

// Converts n elements of a plain float type (f32/f16/bf16/f8) to f32.
// Returns false for types that need dequantization (use quant/ for GGUF blocks).
bool convert_to_f32(DType t, const void* src /*[n]*/, float* dst /*[n]*/, uint64_t n);

}  // namespace lancet
