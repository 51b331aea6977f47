// Tensor-parallel sharding (Megatron style) of a Llama checkpoint: which part of every HF
// tensor rank r of N owns. Column-parallel q/k/v and gate/up (rows of W split: query heads,
// KV heads, intermediate columns), row-parallel o_proj and down_proj (the matching input
// columns; partial outputs are summed by an all-reduce), vocab-parallel embedding and lm_head
// (rows of the vocabulary). Norm weights are replicated. When N exceeds num_kv_heads, each KV
// head is replicated on the N / num_kv_heads ranks whose query heads read it (as vLLM does).
// Slices are host copies in the source dtype (F32/F16/BF16 sources only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/model_config.h"
#include "io/model_source.h"

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

// A host tensor that owns its bytes.
struct TpOwnedTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  TensorView view() const { return TensorView{dtype, shape, bytes.data(), bytes.size()}; }
};

// Rows [begin, begin + count) of a 2-D tensor [rows, cols]; `name` labels errors.
StatusOr<TpOwnedTensor> tp_slice_rows(const TensorView& t, int64_t begin, int64_t count,
                                      const std::string& name);
// Columns [begin, begin + count) of every row of a 2-D tensor [rows, cols].
StatusOr<TpOwnedTensor> tp_slice_cols(const TensorView& t, int64_t begin, int64_t count,
                                      const std::string& name);

// How the scheme splits one HF tensor.
enum class TpSplit { kReplicated, kRows, kCols };

// The rank's slice of the HF tensor `hf_name` ("model.layers.3.mlp.down_proj.weight",
// "model.embed_tokens.weight", "lm_head.weight", norms), with its full shape checked
// against the config first. Tied lm_head: pass "model.embed_tokens.weight" for it.
StatusOr<TpOwnedTensor> tp_shard_tensor(const ModelSource& src, const std::string& hf_name,
                                        const TpRankLayout& layout);

// Which split tp_shard_tensor applies to hf_name.
TpSplit tp_split_of(const std::string& hf_name);

}  // namespace lancet
