// GGUF (ggml) block-quantized formats: the byte layout of one block of each type, the mapping
// between ggml type ids and DType, and reference scalar dequantization/quantization of rows.
// The CPU backend includes the block structs for its fast kernels; the functions here are the
// reference the fast kernels are tested against, so they favor clarity and exactness over speed.
//
// Conventions shared by every format (as ggml stores them, little-endian):
//  - f16 fields are IEEE binary16 bit patterns (use f16_to_f32 from core/dtype.h);
//  - a row of n elements is n / block_elems consecutive blocks;
//  - the "32-element" formats (Q4_0 .. Q8_0) put element j in the low nibble of qs[j] and
//    element j + 16 in the high nibble (not interleaved pairs);
//  - the K formats cover 256 elements ("super-block") with per-sub-block 4..8 bit scales.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "core/status.h"

namespace lancet {

constexpr int kQK = 32;    // elements per block of the Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 formats
constexpr int kQK_K = 256;  // elements per super-block of the K formats
constexpr int kKScaleSize = 12;  // packed 6-bit scales+mins of Q4_K/Q5_K

// y = d * (q - 8), q 4-bit.
struct BlockQ4_0 {
  uint16_t d;           // f16
  uint8_t qs[kQK / 2];  // nibbles
};
// y = d * q + m, q 4-bit.
struct BlockQ4_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qs[kQK / 2];
};
// y = d * (q - 16), q 5-bit: low 4 bits in qs, bit 4 of element j in bit j of qh (LE u32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// y = d * q + m, q 5-bit (bits as Q5_0).
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// y = d * q, q int8.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// 16 sub-blocks of 16: y = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4), q 2-bit.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
// 16 sub-blocks of 16: y = d * (s - 32) * (q - (hbit ? 0 : 4)), q 2-bit + 1 high bit, s 6-bit.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32: y = d * sc[j] * q - dmin * m[j], q 4-bit, sc/m 6-bit packed in scales.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
// As Q4_K with a fifth bit per element in qh (bit j of qh[l] for sub-block j).
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16: y = d * scales[i] * (q - 32), q 6-bit (4 low in ql, 2 high in qh).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

static_assert(sizeof(BlockQ4_0) == 18 && alignof(BlockQ4_0) == 2);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block.
inline void k_scale_min(int j, const uint8_t* scales /*[12]*/, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// ggml type id (the u32 stored in a GGUF tensor info) <-> DType. Types we do not decode
// (IQ*, TQ*, Q8_1, Q8_K, MXFP4, ...) map to nullopt.
std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type);
std::optional<uint32_t> ggml_type_from_dtype(DType t);

// Dequantizes n elements (a whole number of blocks) of type t to float. Supports F32, F16,
// BF16, F8 and every GGUF block type in DType. Block data is read bytewise, so src needs no
// particular alignment.
Status dequantize_row(DType t, const void* src /*[n / block_elems blocks]*/, float* dst /*[n]*/,
                      int64_t n);

// Quantizes n elements (a whole number of blocks). F32/F16/BF16 round to nearest even.
// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 follow ggml's reference quantizers bit for bit. Q4_K/Q5_K/Q6_K use
// a min/max quantizer (sub-block scales rounded up so no value clips); Q2_K/Q3_K are not
// supported (Unimplemented). Non-finite inputs are an error.
Status quantize_row(DType t, const float* src /*[n]*/, void* dst /*[n / block_elems blocks]*/,
                    int64_t n);

}  // namespace lancet
