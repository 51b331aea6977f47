// The CPU backend's hot loops, compiled once per instruction set (kernels_scalar.cc,
// kernels_avx2.cc, kernels_avx512.cc all include kernels_impl.inc) and picked at run time.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace lancet::cpu {

// Tile sizes shared by every ISA: a weight tile is kTileRows rows x kTileK columns, converted
// to f32 once and then used for every token of the step (cache blocking).
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileK = 512;  // a multiple of every block size (32, 256)

// One sequence's attention work item: a run of query tokens for one KV head (all the query
// heads of its group), over the paged cache.
struct AttentionItem {
  const float* q;             // [num_tokens, num_heads, head_dim], first token of the run
  float* out;                 // same layout as q
  int64_t q_tokens;           // tokens in the run
  int64_t first_pos;          // position of the run's first token
  int64_t kv_head;
  int64_t group;              // query heads per KV head
  int64_t num_heads;
  const int32_t* block_table; // [max_blocks_per_seq]
  float scale;
  bool p_e4m3 = false;        // round P to E4M3 before P V, the row sums over the rounded P
};

struct CpuKernels {
  const char* isa;
  // dst[r, 0:kc] = f32(w[r0 + r, k0:k0+kc]) * row scale, for r < nr; k0 and kc whole blocks.
  void (*convert_tile)(const WeightMatrix& w, int64_t r0, int64_t nr, int64_t k0, int64_t kc,
                       float* dst /*[nr, ldd]*/, int64_t ldd);
  // y[i, j] (+)= sum_k x[i, k] * w[j, k] for i < n, j < m, k < kc.
  void (*gemm_f32)(const float* x /*[n, ldx]*/, int64_t ldx, int64_t n,
                   const float* w /*[m, ldw]*/, int64_t ldw, int64_t m, int64_t kc,
                   float* y /*[n, ldy]*/, int64_t ldy, bool accumulate);
  void (*attention)(const AttentionItem& item, const KvCacheLayer& cache);
};

const CpuKernels* kernels_scalar();
const CpuKernels* kernels_avx2();    // null when not compiled in
const CpuKernels* kernels_avx512();  // null when not compiled in

// Best table for this CPU, or the one named ("avx512", "avx2", "scalar"); error if the CPU
// lacks it.
StatusOr<const CpuKernels*> select_kernels(const std::string& isa);

}  // namespace lancet::cpu
