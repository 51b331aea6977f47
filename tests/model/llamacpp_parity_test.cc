// Greedy decoding of the default model (SmolLM2-135M-Instruct Q4_1) against llama.cpp's
// (tests/model/data/smollm2_llamacpp_greedy.json, written by tools/llamacpp_reference.py with
// an F32 KV cache). Both engines quantize activations the same way (Q8_1 for Q4_1 weights,
// Q8_0 for the Q8_0 lm_head; each matmul agrees with llama.cpp's to ~2e-7 on identical
// inputs), but int8 rounding turns last-bit differences of its inputs (float summation order,
// llama.cpp's f16 flash attention and its exp approximation) into whole quantization steps, so
// the two engines' logits differ by ~0.2-0.3 rms (up to ~0.9) on this model. Hence:
//  - the cases listed in kExact must match llama.cpp token for token;
//  - every other case may leave llama.cpp's path only at a near-tie: at the first differing
//    step, llama.cpp's token must be within tie_bound() logits of our top-1. Observed gaps are
//    0.005-0.19 where the CPU backend runs its AVX-512 kernels (bound 0.25), and up to 0.38 on an
//    AVX2-only CPU (bound 0.5); a real numerical bug (wrong scale, block or row) moves logits by
//    whole units and breaks the exact cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/model_source.h"
#include "model/llama_model.h"
#include "runner/llama_executor.h"
#include "runner/sequence_runner.h"
#include "test_paths.h"

namespace lancet {
namespace {

// The reference and the gaps above were measured where the CPU backend runs AVX-512 kernels;
// an AVX2-only CPU sums in another order (one gap 0.38, inside the spread above).
float tie_bound() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") ? 0.25f : 0.5f;
}
// Cases whose 32 greedy tokens (or all tokens up to EOS) equal llama.cpp's.
const std::set<std::string> kExact = {"q0", "q6"};

TEST(LlamaCppParity, GreedyContinuationsMatchOrDivergeAtTies) {
  const std::string path = testing::default_model();
  if (path.empty()) FAIL() << "default model not downloaded (tools/fetch_model.sh)";
  std::ifstream f(testing::source_dir() + "/tests/model/data/smollm2_llamacpp_greedy.json");
  ASSERT_TRUE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f);
  auto src = open_model_source(path);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  LlamaModelOptions mo;
  mo.max_model_len = 256;
  auto model = LlamaModel::create(**src, **be, mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int32_t eos = static_cast<int32_t>((*src)->config().eos_token_ids.empty() ? 2 : (*src)->config().eos_token_ids[0]);

  std::string table;
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    const std::string name = c["name"];
    const std::vector<int32_t> prompt = c["prompt_ids"];
    const std::vector<int32_t> want = c["llamacpp_greedy"];
    auto exec = LlamaExecutor::create(**model, KvBlockConfig{16, 16}).value();
    SequenceRunner seq(*exec);
    std::vector<float> logits;
    ASSERT_TRUE(seq.step_last(prompt, &logits).ok());
    // Up to the first difference our greedy tokens are llama.cpp's, so feed those.
    int64_t agree = -1;
    float gap = 0.f;
    for (size_t i = 0; i < want.size(); ++i) {
      const int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (agree < 0 && best != want[i]) {
        agree = static_cast<int64_t>(i);
        gap = logits[best] - logits[want[i]];
      }
      if (agree >= 0 || i + 1 == want.size() || want[i] == eos) break;
      const int32_t next = want[i];
      ASSERT_EQ(seq.position(), static_cast<int64_t>(prompt.size() + i));
      ASSERT_TRUE(seq.step_last(std::span<const int32_t>(&next, 1), &logits).ok());
    }
    const int64_t n = agree < 0 ? static_cast<int64_t>(want.size()) : agree;
    char line[200];
    std::snprintf(line, sizeof line, "  %-24s %2lld/%-2zu %s\n", name.c_str(), static_cast<long long>(n), want.size(),
                  agree < 0 ? "exact" : ("diverges, gap " + std::to_string(gap)).c_str());
    table += line;
    if (kExact.count(name)) {
      EXPECT_LT(agree, 0) << name << " must match llama.cpp exactly; first difference at step " << agree;
    } else if (agree >= 0) {
      EXPECT_LT(gap, tie_bound()) << name << ": at step " << agree << " llama.cpp's token " << want[agree]
                                << " is " << gap << " logits below our top-1 (not a tie)";
    }
    ++checked;
  }
  std::printf("agreement with llama.cpp (prefix / reference length):\n%s", table.c_str());
  EXPECT_EQ(checked, 9);
}

}  // namespace
}  // namespace lancet
