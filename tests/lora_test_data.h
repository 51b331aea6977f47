// The peft LoRA references on tiny-llama3 (tests/data/lora-tiny-llama3): where an adapter's
// folder is, and the int32 tensors (prompt ids, greedy tokens) of a golden file.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "test_paths.h"

namespace lancet::testing {

inline std::string lora_adapter_dir(const std::string& name) {
  return source_dir() + "/tests/data/lora-tiny-llama3/" + name;
}

// golden: a golden.safetensors path; tensor: e.g. "case1.input_ids" (empty, with a test
// failure, when missing).
inline std::vector<int32_t> golden_ids(const std::string& golden, const std::string& tensor) {
  auto f = SafetensorsFile::open(golden);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return {};
  const TensorView* t = (*f)->find(tensor);
  EXPECT_NE(t, nullptr) << tensor;
  if (!t) return {};
  const int32_t* p = static_cast<const int32_t*>(t->data);
  return std::vector<int32_t>(p, p + t->numel());
}

}  // namespace lancet::testing
