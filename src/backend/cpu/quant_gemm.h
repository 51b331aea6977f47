// Integer matmul for the 32-element GGUF block formats (Q8_0, Q4_0, Q4_1), the way llama.cpp
// computes them: each activation row is quantized once per matmul to int8 per 32-block
// (scale = amax / 127 stored as f16, round to nearest even; for Q4_1 weights also
// s = f16(d * sum(q)), llama.cpp's Q8_1), and every output is
//   sum_b  f16(dw_b) * dx_b * int_dot_b  (+ sum_b f16(mw_b) * sx_b for Q4_1)
// with the block sums kept as exact integers. Weights are repacked once at upload into groups
// of kPackRows rows whose blocks are interleaved 4 bytes per row, so one SIMD integer
// instruction multiplies 16 rows by 4 activation bytes (broadcast) and the 16 outputs land in
// separate lanes: no horizontal sums, each weight byte loaded once per token tile.
//
// Every ISA (scalar, AVX2 maddubs, AVX-512 VNNI) computes each output with the same float
// operations in the same order (block by block, fused multiply-adds), so they agree bit for
// bit with the scalar reference, and a token's result does not depend on the batch it is in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace lancet::cpu {

constexpr int64_t kPackRows = 16;

// True for the formats this path handles.
bool quant_gemm_supports(DType t);

// Packed layout of a [rows, cols] weight: ceil(rows / 16) groups x (cols / 32) blocks; the
// (group g, block b) record at packed + (g * nb + b) * group_block_bytes(t) holds
//   u16 d[16] (f16), then for Q4_1 u16 m[16] (f16), then the quants as chunks of 16 u32: chunk
//   c lane r = bytes 4c..4c+3 of row r's block quants (4 chunks of nibbles for Q4_0/Q4_1,
//   8 chunks of int8 for Q8_0). Rows past `rows` are zero.
size_t group_block_bytes(DType t);
struct PackedWeight {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0, groups = 0, nb = 0;
  std::vector<uint8_t, std::allocator<uint8_t>> bytes;  // [groups, nb, group_block_bytes]
};
// Repacks w (row-major GGUF blocks) into the interleaved layout.
std::shared_ptr<PackedWeight> pack_weight(const WeightMatrix& w);

// n activation rows quantized per 32-block.
struct QuantActs {
  int64_t n = 0, k = 0, nb = 0;
  const int8_t* q = nullptr;     // [n, k]
  const float* d = nullptr;      // [n, nb] f16-rounded block scale
  const float* s = nullptr;      // [n, nb] f16(d * sum(q)) (the Q8_1 term of Q4_1 weights)
  const int32_t* sum = nullptr;  // [n, nb] sum(q)
};

// Owns the storage of QuantActs; grows, never shrinks.
class QuantActsBuffer {
 public:
  QuantActs prepare(int64_t n, int64_t k);
  int8_t* q() { return q_.data(); }
  float* d() { return d_.data(); }
  float* s() { return s_.data(); }
  int32_t* sum() { return sum_.data(); }

 private:
  std::vector<int8_t> q_;
  std::vector<float> d_, s_;
  std::vector<int32_t> sum_;
};

struct QuantGemmKernels {
  const char* isa;
  // Quantizes rows [i0, i1) of x [n, k] into buf (prepared for n x k).
  void (*quantize_rows)(const float* x /*[n, k]*/, int64_t k, int64_t i0, int64_t i1, QuantActsBuffer& buf);
  // y[i, r] = W[r] . x[i] for tokens i in [i0, i1) and rows r of groups [g0, g1) (r < rows).
  void (*gemm)(const PackedWeight& w, int64_t g0, int64_t g1, const QuantActs& x, int64_t i0, int64_t i1,
               float* y /*[n, ldy]*/, int64_t ldy);
};

const QuantGemmKernels* quant_gemm_scalar();
const QuantGemmKernels* quant_gemm_avx2();    // null if the CPU lacks AVX2/FMA/F16C
const QuantGemmKernels* quant_gemm_vnni();    // null if the CPU lacks AVX-512 VNNI (+BW/VL)

}  // namespace lancet::cpu
