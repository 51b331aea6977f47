// What an FP8 checkpoint stores for each tensor of a Llama model, shared by the converter
// (`lancet quantize --fp8`) and online quantization (`--quantization fp8`) so both produce the
// same bytes:
//  - the decoder layers' linear projections (q/k/v/o, gate/up/down) become F8_E4M3 with a
//    per-output-channel scale (fp8_quantize.h), stored as `<module>.weight_scale` [rows, 1];
//  - everything else (embed_tokens, lm_head, norms) keeps a 16-bit or wider float: F16/BF16
//    tensors as they are, F32 matrices and GGUF block-quantized matrices as BF16, GGUF
//    vectors as F32.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "quant/fp8_gptq.h"
#include "quant/fp8_quantize.h"

namespace lancet {

// A tensor with its own storage (a converted copy); view() points into bytes.
struct OwnedTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  TensorView view() const { return TensorView{dtype, shape, bytes.data(), bytes.size()}; }
};

// True for "model.layers.N.self_attn.{q,k,v,o}_proj.weight" and
// "model.layers.N.mlp.{gate,up,down}_proj.weight": the tensors FP8 checkpoints quantize.
bool fp8_quantizes_tensor(const std::string& hf_name);

// Any plain float (F32/F16/BF16/F8) or GGUF block tensor as f32; `name` labels errors.
StatusOr<std::vector<float>> tensor_to_f32(const TensorView& t, const std::string& name);

// The same tensor as BF16 (rounded to nearest even).
StatusOr<OwnedTensor> tensor_to_bf16(const TensorView& t, const std::string& name);

struct Fp8Weight {
  OwnedTensor weight;  // F8_E4M3 [rows, cols]
  OwnedTensor scale;   // F32 or BF16 [rows, 1]
};

// Quantizes a 2-D weight (any dtype tensor_to_f32 reads) per output channel: rounded to
// nearest, or with error compensation over `gptq` (fp8_gptq.h) when given. NaN/inf in the
// weight is InvalidArgument naming it; an FP8 input is InvalidArgument (already quantized).
StatusOr<Fp8Weight> quantize_weight_fp8(const TensorView& t, const std::string& name,
                                        const Fp8QuantizeOptions& opts = {}, const Fp8GptqFactor* gptq = nullptr);

// A tensor the FP8 layout keeps in high precision: nullopt when the source tensor is stored as
// it is (F16/BF16, or an F32 vector), else the converted copy (BF16 matrix / F32 vector).
StatusOr<std::optional<OwnedTensor>> fp8_kept_tensor(const TensorView& t, const std::string& name);

}  // namespace lancet
