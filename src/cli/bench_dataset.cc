// Bench prompts (bench_dataset.h): random ids, JSON lines, ShareGPT.
#include "cli/bench_dataset.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

namespace lancet::cli {
namespace {

using Json = nlohmann::json;

// vLLM's ShareGPT filters (benchmark_dataset.py is_valid_sequence).
constexpr int64_t kMinTokens = 4;
constexpr int64_t kMaxPromptTokens = 1024;
constexpr int64_t kMaxTotalTokens = 2048;

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open dataset " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Random ids of input_len, skipping the first 256 ids (where byte and special tokens usually
// live) in vocabularies that large.
std::vector<BenchPrompt> random_prompts(const DatasetOptions& o, int64_t vocab) {
  std::mt19937_64 rng(o.seed);
  const int64_t lo = vocab > 1024 ? 256 : 3;
  std::vector<BenchPrompt> out(static_cast<size_t>(o.num_prompts));
  for (BenchPrompt& p : out) {
    p.ids.resize(static_cast<size_t>(o.input_len));
    for (auto& t : p.ids) t = static_cast<int32_t>(lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab - lo)));
  }
  return out;
}

StatusOr<std::vector<BenchPrompt>> json_lines(const std::string& text, const DatasetOptions& o,
                                              const DatasetTokenizer& tok) {
  std::vector<BenchPrompt> out;
  std::istringstream in(text);
  std::string line;
  int64_t n = 0;
  while (static_cast<int>(out.size()) < o.num_prompts && std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = o.path + ":" + std::to_string(n) + ": ";
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return InvalidArgument(where + "each line must be a JSON object");
    BenchPrompt p;
    if (j.contains("prompt_ids")) {
      if (!j["prompt_ids"].is_array()) return InvalidArgument(where + "prompt_ids must be a list of token ids");
      for (const Json& id : j["prompt_ids"]) {
        if (!id.is_number_integer()) return InvalidArgument(where + "prompt_ids must be a list of token ids");
        p.ids.push_back(id.get<int32_t>());
      }
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      ASSIGN_OR_RETURN(p.ids, tok.encode(j["prompt"].get<std::string>()));
    } else {
      return InvalidArgument(where + "a line has neither prompt nor prompt_ids");
    }
    if (j.contains("output_len")) {
      if (!j["output_len"].is_number_integer() || j["output_len"].get<int64_t>() < 1)
        return InvalidArgument(where + "output_len must be a positive integer");
      p.output_len = j["output_len"].get<int32_t>();
    }
    out.push_back(std::move(p));
  }
  if (out.empty()) return InvalidArgument(o.path + " holds no prompts");
  return out;
}

// The first two turns' texts of every conversation that has them.
StatusOr<std::vector<std::pair<std::string, std::string>>> sharegpt_pairs(const std::string& text,
                                                                          const std::string& path) {
  const Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return InvalidArgument(path + ": a ShareGPT file is one JSON list");
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const Json& e : j) {
    if (!e.is_object() || !e.contains("conversations") || !e["conversations"].is_array()) continue;
    const Json& c = e["conversations"];
    if (c.size() < 2 || !c[0].is_object() || !c[1].is_object()) continue;
    if (!c[0].contains("value") || !c[0]["value"].is_string() || !c[1].contains("value") ||
        !c[1]["value"].is_string())
      continue;
    pairs.emplace_back(c[0]["value"].get<std::string>(), c[1]["value"].get<std::string>());
  }
  return pairs;
}

StatusOr<std::vector<BenchPrompt>> sharegpt(const std::string& text, const DatasetOptions& o,
                                            const DatasetTokenizer& tok) {
  ASSIGN_OR_RETURN(auto pairs, sharegpt_pairs(text, o.path));
  std::shuffle(pairs.begin(), pairs.end(), std::mt19937_64(o.seed));
  std::vector<BenchPrompt> out;
  for (const auto& [prompt, completion] : pairs) {
    if (static_cast<int>(out.size()) >= o.num_prompts) break;
    BenchPrompt p;
    ASSIGN_OR_RETURN(p.ids, tok.encode(prompt));
    int64_t output_len = o.fixed_output_len;
    if (output_len <= 0) {
      ASSIGN_OR_RETURN(const std::vector<int32_t> c, tok.encode(completion));
      output_len = static_cast<int64_t>(c.size());
    }
    const int64_t prompt_len = static_cast<int64_t>(p.ids.size());
    if (prompt_len < kMinTokens || (o.fixed_output_len <= 0 && output_len < kMinTokens)) continue;
    if (prompt_len > kMaxPromptTokens || prompt_len + output_len > kMaxTotalTokens) continue;
    p.output_len = static_cast<int32_t>(output_len);
    out.push_back(std::move(p));
  }
  if (out.empty()) return InvalidArgument(o.path + ": no conversation passes the ShareGPT length filters");
  return out;
}

}  // namespace

StatusOr<DatasetFormat> parse_dataset_format(std::string_view name) {
  if (name == "auto") return DatasetFormat::kAuto;
  if (name == "jsonl") return DatasetFormat::kJsonLines;
  if (name == "sharegpt") return DatasetFormat::kShareGpt;
  return InvalidArgument("--dataset-name must be auto, jsonl or sharegpt, not '" + std::string(name) + "'");
}

StatusOr<std::vector<BenchPrompt>> make_bench_prompts(const DatasetOptions& o, const DatasetTokenizer& tok) {
  if (o.num_prompts < 1) return InvalidArgument("--num-prompts must be at least 1");
  if (o.path.empty()) {
    if (o.input_len < 1) return InvalidArgument("--input-len must be at least 1");
    return random_prompts(o, tok.vocab_size);
  }
  ASSIGN_OR_RETURN(const std::string text, read_file(o.path));
  DatasetFormat format = o.format;
  if (format == DatasetFormat::kAuto) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    format = first != std::string::npos && text[first] == '[' ? DatasetFormat::kShareGpt : DatasetFormat::kJsonLines;
  }
  return format == DatasetFormat::kShareGpt ? sharegpt(text, o, tok) : json_lines(text, o, tok);
}

}  // namespace lancet::cli
