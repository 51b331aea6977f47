// The prompts of `lancet bench throughput`: random token ids of one length, a JSON-lines file
// ({"prompt": text} or {"prompt_ids": [...]} per line, optionally "output_len"), or a ShareGPT
// conversation file as `vllm bench` reads it (a JSON list of {"conversations": [{"from",
// "value"}, ...]}): the first turn is the prompt, the second turn's token count the output
// length (or a fixed one), after a seeded shuffle, keeping pairs of at least 4 prompt and 4
// output tokens, at most 1024 prompt tokens and 2048 together (vLLM's filters).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace lancet::cli {

struct BenchPrompt {
  std::vector<int32_t> ids;
  int32_t output_len = 0;  // 0: the run's --output-len
};

enum class DatasetFormat { kAuto, kJsonLines, kShareGpt };

struct DatasetOptions {
  std::string path;  // empty: random prompts
  DatasetFormat format = DatasetFormat::kAuto;  // kAuto: a file starting with '[' is ShareGPT
  int num_prompts = 0;
  int input_len = 0;            // random prompts
  int fixed_output_len = 0;     // ShareGPT: > 0 replaces the second turn's length
  uint64_t seed = 0;
};

// Text -> token ids as the prompt would be sent (the model's tokenizer; an error when it has
// none), the vocabulary size for random ids.
struct DatasetTokenizer {
  std::function<StatusOr<std::vector<int32_t>>(const std::string&)> encode;
  int64_t vocab_size = 0;
};

StatusOr<DatasetFormat> parse_dataset_format(std::string_view name);  // auto, jsonl, sharegpt

StatusOr<std::vector<BenchPrompt>> make_bench_prompts(const DatasetOptions& o, const DatasetTokenizer& tok);

}  // namespace lancet::cli
