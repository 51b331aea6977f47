// A PEFT LoRA adapter as `peft` saves it: adapter_config.json (r, lora_alpha, use_rslora,
// target_modules, ...) and adapter_model.safetensors with, for each adapted linear layer,
// `base_model.model.<weight path>.lora_A.weight` [r, in] and `...lora_B.weight` [out, r]. The
// adapted weight is W + scale * B . A with scale = lora_alpha / r (lora_alpha / sqrt(r) with
// use_rslora). Only what this reads is accepted: linear layers of the decoder (q/k/v/o,
// gate/up/down), one rank and alpha for all of them, no DoRA, biases or modules_to_save; anything
// else is an error naming it, never ignored.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "core/tensor.h"
#include "io/safetensors.h"

namespace lancet {

struct LoraFactors {
  const TensorView* a = nullptr;  // [rank, in]
  const TensorView* b = nullptr;  // [out, rank]
};

class LoraAdapter {
 public:
  // `path`: the adapter's folder (or its adapter_config.json).
  static StatusOr<std::unique_ptr<LoraAdapter>> open(const std::string& path);

  int64_t rank() const { return rank_; }
  double alpha() const { return alpha_; }
  double scale() const { return scale_; }
  // Keyed by the adapted weight's name in the base checkpoint ("model.layers.0.self_attn.q_proj.weight").
  const std::map<std::string, LoraFactors>& factors() const { return factors_; }
  // w [out, in] (f32) += scale * B . A for the weight `name`; an error when the factors' shapes do
  // not fit [out, in], nothing when the adapter leaves that weight alone. With a pool, rows are
  // computed in parallel (each row alike, so the result does not depend on it).
  Status apply(const std::string& name, float* w, int64_t out, int64_t in, ThreadPool* pool = nullptr) const;
  // The factors of weight `name` ([out, in]) as f32: a [rank, in], b [out, rank] (unscaled).
  // False when the adapter leaves that weight alone; an error when they do not fit [out, in].
  StatusOr<bool> factors_f32(const std::string& name, int64_t out, int64_t in, std::vector<float>* a,
                             std::vector<float>* b) const;

 private:
  std::unique_ptr<SafetensorsFile> file_;
  int64_t rank_ = 0;
  double alpha_ = 0;
  double scale_ = 0;
  std::map<std::string, LoraFactors> factors_;
};

}  // namespace lancet
