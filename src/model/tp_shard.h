// Tensor-parallel sharding (Megatron style) of a Llama checkpoint: which part of every HF
// tensor rank r of N owns. Column-parallel q/k/v and gate/up (rows of W split: query heads,
// KV heads, intermediate columns), row-parallel o_proj and down_proj (the matching input
// columns; partial outputs are summed by an all-reduce), vocab-parallel embedding and lm_head
// (rows of the vocabulary). Norm weights are replicated. When N exceeds num_kv_heads, each KV
// head is replicated on the N / num_kv_heads ranks whose query heads read it (as vLLM does).
// Slices are host copies in the tensor's dtype (F32/F16/BF16 and FP8; not GGUF blocks). FP8
// weights are sliced after quantization, with their per-output-channel scales: a rank that
// holds some rows holds their scales; a rank that holds some columns keeps every row's scale,
// so every rank dequantizes exactly as one rank does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/model_config.h"
#include "io/model_source.h"
#include "quant/fp8_weights.h"

namespace lancet {

struct TpShardSpec {
  int rank = 0;
  int size = 1;
};

// What one rank owns, in units of the full model.
struct TpRankLayout {
  int64_t num_heads = 0;      // local query heads, starting at head_begin
  int64_t head_begin = 0;
  int64_t num_kv_heads = 0;   // local KV heads, starting at kv_head_begin (replicated if N > kv heads)
  int64_t kv_head_begin = 0;
  int64_t intermediate = 0;   // local MLP columns, starting at intermediate_begin
  int64_t intermediate_begin = 0;
  int64_t vocab = 0;          // local vocabulary rows, starting at vocab_begin
  int64_t vocab_begin = 0;
};

// Checks that cfg can be split over `size` ranks; errors name the dimension that does not
// divide (num_heads, num_kv_heads, intermediate_size, vocab_size).
Status validate_tp_config(const ModelConfig& cfg, int size);

StatusOr<TpRankLayout> tp_rank_layout(const ModelConfig& cfg, const TpShardSpec& spec);

// Rows [begin, begin + count) of a 2-D tensor [rows, cols]; `name` labels errors.
StatusOr<OwnedTensor> tp_slice_rows(const TensorView& t, int64_t begin, int64_t count,
                                      const std::string& name);
// Columns [begin, begin + count) of every row of a 2-D tensor [rows, cols].
StatusOr<OwnedTensor> tp_slice_cols(const TensorView& t, int64_t begin, int64_t count,
                                      const std::string& name);

// How the scheme splits one HF tensor: which rows (kRows) or columns (kCols) of the full
// [rows, cols] matrix this rank holds. count == the full extent when the rank holds it whole.
enum class TpSplit { kReplicated, kRows, kCols };
struct TpSlice {
  TpSplit split = TpSplit::kReplicated;
  int64_t begin = 0;
  int64_t count = 0;
};
// The slice of the HF matrix `hf_name` (q/k/v/o, gate/up/down, embed_tokens, lm_head) that
// `layout` owns; kReplicated for any other name.
TpSlice tp_slice_of(const std::string& hf_name, const ModelConfig& cfg, const TpRankLayout& layout);

// Rows [begin, begin + count) of a per-row scale tensor ([rows] or [rows, 1], f32/bf16).
StatusOr<OwnedTensor> tp_slice_scale_rows(const TensorView& scale, int64_t begin, int64_t count,
                                          const std::string& name);

}  // namespace lancet
