// `lancet inspect PATH [--json]`: what a model is before loading it for real: architecture,
// dims, rope, vocab, the dtype/quantization mix, tensor count and sizes, and the memory the
// weights and the KV cache need.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "io/model_source.h"

namespace lancet::cli {
namespace {

struct DtypeTally {
  int64_t tensors = 0;
  int64_t elements = 0;
  uint64_t bytes = 0;
};

nlohmann::json describe(const ModelSource& src) {
  const ModelConfig& c = src.config();
  nlohmann::json j;
  j["path"] = src.path();
  j["format"] = src.format();
  j["architecture"] = c.architecture;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_layers"] = c.num_layers;
  j["num_heads"] = c.num_heads;
  j["num_kv_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_ids"] = c.eos_token_ids;
  nlohmann::json rope;
  rope["theta"] = c.rope_theta;
  rope["type"] = rope_type_name(c.rope_scaling.type);
  rope["interleaved"] = c.rope_interleaved;
  if (c.rope_scaling.type != RopeType::kDefault) {
    rope["factor"] = c.rope_scaling.factor;
    rope["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
  }
  if (c.rope_scaling.type == RopeType::kLlama3) {
    rope["low_freq_factor"] = c.rope_scaling.low_freq_factor;
    rope["high_freq_factor"] = c.rope_scaling.high_freq_factor;
  }
  if (c.rope_scaling.type == RopeType::kYarn) {
    rope["beta_fast"] = c.rope_scaling.beta_fast;
    rope["beta_slow"] = c.rope_scaling.beta_slow;
  }
  j["rope"] = rope;
  const char* qm = "none";
  switch (c.quant.method) {
    case QuantMethod::kNone: qm = "none"; break;
    case QuantMethod::kFp8: qm = "fp8"; break;
    case QuantMethod::kCompressedTensors: qm = "compressed-tensors"; break;
    case QuantMethod::kGguf: qm = "gguf"; break;
  }
  j["quantization"] = qm;

  std::map<std::string, DtypeTally> mix;
  int64_t params = 0;
  uint64_t bytes = 0;
  for (const auto& [name, t] : src.tensors()) {
    DtypeTally& d = mix[dtype_name(t.dtype)];
    d.tensors++;
    d.elements += t.numel();
    d.bytes += t.nbytes;
    params += t.numel();
    bytes += t.nbytes;
  }
  nlohmann::json dm = nlohmann::json::object();
  for (const auto& [name, d] : mix)
    dm[name] = {{"tensors", d.tensors}, {"elements", d.elements}, {"bytes", d.bytes}};
  j["dtypes"] = dm;
  j["tensor_count"] = src.tensors().size();
  j["parameters"] = params;
  j["weight_bytes"] = bytes;
  // KV cache per token: K and V for every layer, kv_heads x head_dim each.
  const int64_t kv_elems_per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim;
  j["kv_bytes_per_token"] = {{"bf16", kv_elems_per_token * 2}, {"fp8", kv_elems_per_token}};
  j["kv_bytes_full_context_bf16"] = kv_elems_per_token * 2 * c.max_position_embeddings;
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [name, t] : src.tensors())
    tensors.push_back({{"name", name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape},
                       {"bytes", t.nbytes}});
  j["tensors"] = tensors;
  return j;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

void print_text(const nlohmann::json& j, bool list_tensors) {
  std::printf("model:        %s (%s)\n", j["path"].get<std::string>().c_str(),
              j["format"].get<std::string>().c_str());
  std::printf("architecture: %s\n", j["architecture"].get<std::string>().c_str());
  std::printf("dims:         hidden %lld, intermediate %lld, layers %lld, heads %lld, kv heads %lld, head_dim %lld\n",
              j["hidden_size"].get<long long>(), j["intermediate_size"].get<long long>(),
              j["num_layers"].get<long long>(), j["num_heads"].get<long long>(),
              j["num_kv_heads"].get<long long>(), j["head_dim"].get<long long>());
  std::printf("vocab:        %lld (tied embeddings: %s)\n", j["vocab_size"].get<long long>(),
              j["tie_word_embeddings"].get<bool>() ? "yes" : "no");
  std::printf("context:      %lld positions\n", j["max_position_embeddings"].get<long long>());
  std::printf("rope:         %s\n", j["rope"].dump().c_str());
  std::printf("quantization: %s\n", j["quantization"].get<std::string>().c_str());
  std::printf("tensors:      %zu, %lld parameters, %s\n", j["tensor_count"].get<size_t>(),
              j["parameters"].get<long long>(), human_bytes(j["weight_bytes"].get<double>()).c_str());
  for (const auto& [name, d] : j["dtypes"].items())
    std::printf("  %-8s %5lld tensors  %s\n", name.c_str(), d["tensors"].get<long long>(),
                human_bytes(d["bytes"].get<double>()).c_str());
  std::printf("kv cache:     %s/token (bf16), %s at full context\n",
              human_bytes(j["kv_bytes_per_token"]["bf16"].get<double>()).c_str(),
              human_bytes(j["kv_bytes_full_context_bf16"].get<double>()).c_str());
  if (list_tensors) {
    for (const auto& t : j["tensors"])
      std::printf("  %-56s %-8s %s\n", t["name"].get<std::string>().c_str(),
                  t["dtype"].get<std::string>().c_str(), t["shape"].dump().c_str());
  }
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  CLI::App app{"Print a model's architecture, dims, dtypes and memory needs", "lancet inspect"};
  std::string path;
  bool json = false, list = false;
  app.add_option("path", path, "HF model directory, config.json, .safetensors or .gguf")->required();
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--tensors", list, "list every tensor (text output)");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  auto src = open_model_source(path);
  if (!src.ok()) {
    std::fprintf(stderr, "lancet inspect: %s\n", src.status().to_string().c_str());
    return 1;
  }
  nlohmann::json j = describe(**src);
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_text(j, list);
  }
  return 0;
}

}  // namespace lancet::cli
