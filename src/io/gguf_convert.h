// HF checkpoint -> llama-architecture GGUF, laid out as llama.cpp's convert_hf_to_gguf.py does:
// ggml tensor names, llama.* metadata (rope scaling included), q/k rows permuted for
// interleaved-pair rope, Llama 3 rope scaling as a `rope_freqs.weight` tensor. The result
// loads through open_gguf_source with rope_interleaved = true and computes the same logits.
// Tokenizer metadata is not written (tokenizer.json stays the tokenizer's source).
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "io/model_source.h"

namespace lancet {

// `weight_type` applies to the 2-D matrices (embeddings, projections, lm_head): F32, F16,
// BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K (a matrix whose row length is not a
// multiple of the block size is an error). Norm weights are always F32. Tensors are converted
// one at a time while the file is written, so memory stays at one tensor.
Status convert_to_gguf(const ModelSource& src, const std::string& out_path, DType weight_type);

// Row order llama.cpp gives attn_q / attn_k: within each head of `head_dim` rows, output row
// 2*i + j takes input row j * head_dim/2 + i (i < head_dim/2, j in {0, 1}).
int64_t gguf_qk_source_row(int64_t out_row, int64_t head_dim);

// Llama 3 per-dimension frequency divisors ([head_dim / 2]) as llama.cpp computes them.
std::vector<float> llama3_rope_freq_factors(const ModelConfig& config);

// The same divisors, adjusted so that theta^(-2i/d) / factor reproduces the inverse frequencies
// transformers actually uses for a checkpoint stored in `dtype` (bf16/f16): it computes them in
// float32 and keeps them in a buffer of the checkpoint's dtype, i.e. rounded. With these, a
// converted model computes the logits of the HF reference, not of an unrounded variant.
std::vector<float> llama3_rope_freq_factors_hf_rounded(const ModelConfig& config, DType dtype);

}  // namespace lancet
