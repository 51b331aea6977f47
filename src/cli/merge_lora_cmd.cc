// `lancet merge-lora BASE ADAPTER OUT`: a Hugging Face checkpoint with a PEFT LoRA adapter merged
// into its weights (W + scale * B . A, io/lora_adapter.h), written as a checkpoint of the base's
// dtypes (the adapted weights converted back with round-to-nearest-even, or kept in F32 with
// --dtype float32), the base's config and
// tokenizer files beside it. `lancet quantize --fp8 OUT OUT-FP8` then makes the FP8 checkpoint.
// Shards are planned from the tensor sizes (--max-shard-size), so memory stays at about one
// shard plus one weight in f32.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/checkpoint_files.h"
#include "cli/commands.h"
#include "cli/parse_args.h"
#include "core/thread_pool.h"
#include "io/lora_adapter.h"
#include "io/model_source.h"
#include "io/safetensors.h"

namespace lancet::cli {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct MergeConfig {
  std::string base;
  std::string adapter;
  std::string output;
  uint64_t max_shard_bytes = 5ull << 30;
  bool f32_adapted = false;  // --dtype float32: adapted weights written as F32
};

// One adapted weight in its base dtype (or F32).
StatusOr<std::vector<uint8_t>> merged_bytes(const TensorView& t, const std::string& name, const LoraAdapter& lora,
                                            bool f32) {
  if (t.shape.size() != 2) return InvalidArgument("merge-lora: " + name + " is not 2-D");
  std::vector<float> w(static_cast<size_t>(t.numel()));
  if (!convert_to_f32(t.dtype, t.data, w.data(), w.size()))
    return Unimplemented("merge-lora: " + name + " is " + dtype_name(t.dtype) +
                         "; the base must hold F32, F16 or BF16 weights (quantize after merging)");
  RETURN_IF_ERROR(lora.apply(name, w.data(), t.shape[0], t.shape[1], &default_thread_pool()));
  std::vector<uint8_t> out(f32 ? w.size() * sizeof(float) : static_cast<size_t>(t.nbytes));
  if (f32 || t.dtype == DType::kF32) {
    std::memcpy(out.data(), w.data(), out.size());
  } else {
    auto* o = reinterpret_cast<uint16_t*>(out.data());
    for (size_t i = 0; i < w.size(); ++i) o[i] = t.dtype == DType::kBF16 ? f32_to_bf16(w[i]) : f32_to_f16(w[i]);
  }
  return out;
}

Status merge(const MergeConfig& cfg) {
  ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> src, open_model_source(cfg.base));
  if (std::string(src->format()) != "safetensors")
    return Unimplemented("merge-lora: " + cfg.base + " is " + src->format() +
                         "; the base must be a Hugging Face checkpoint (safetensors)");
  if (src->tensors().empty()) return InvalidArgument("merge-lora: " + cfg.base + " has no weights");
  if (src->config().quant.method != QuantMethod::kNone)
    return Unimplemented("merge-lora: " + cfg.base + " is a quantized checkpoint; merge into the unquantized model");
  ASSIGN_OR_RETURN(std::unique_ptr<LoraAdapter> lora, LoraAdapter::open(cfg.adapter));
  for (const auto& [name, f] : lora->factors())
    if (!src->find(name)) return InvalidArgument("merge-lora: the adapter adapts " + name + ", which the base lacks");

  const fs::path out_dir(cfg.output);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return IoError("cannot create " + out_dir.string() + ": " + ec.message());
  std::vector<std::vector<std::string>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const auto& [name, t] : src->tensors()) {
    const uint64_t nbytes =
        cfg.f32_adapted && lora->factors().count(name) ? static_cast<uint64_t>(t.numel()) * sizeof(float) : t.nbytes;
    if (shard_bytes > 0 && shard_bytes + nbytes > cfg.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(name);
    shard_bytes += nbytes;
    total += nbytes;
  }
  ojson weight_map = ojson::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shard_file_name(i, shards.size());
    std::fprintf(stderr, "merge-lora: writing %s (%zu tensors)\n", file.c_str(), shards[i].size());
    std::vector<std::vector<uint8_t>> owned;
    owned.reserve(shards[i].size());
    std::vector<SafetensorsWriteTensor> out;
    for (const std::string& name : shards[i]) {
      const TensorView& t = *src->find(name);
      weight_map[name] = file;
      if (!lora->factors().count(name)) {
        out.push_back({name, t.dtype, t.shape, t.data, t.nbytes});
        continue;
      }
      ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, merged_bytes(t, name, *lora, cfg.f32_adapted));
      owned.push_back(std::move(bytes));
      out.push_back({name, cfg.f32_adapted ? DType::kF32 : t.dtype, t.shape, owned.back().data(), owned.back().size()});
    }
    RETURN_IF_ERROR(write_safetensors((out_dir / file).string(), out, {{"format", "pt"}}));
  }
  if (shards.size() > 1)
    RETURN_IF_ERROR(write_json_file(out_dir / "model.safetensors.index.json",
                                    ojson{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}));
  const fs::path base_dir = fs::is_directory(cfg.base, ec) ? fs::path(cfg.base) : fs::path(cfg.base).parent_path();
  fs::copy_file(base_dir / "config.json", out_dir / "config.json", fs::copy_options::overwrite_existing, ec);
  if (ec) return IoError("cannot copy " + (base_dir / "config.json").string() + ": " + ec.message());
  fs::permissions(out_dir / "config.json", fs::perms::owner_write, fs::perm_options::add, ec);
  RETURN_IF_ERROR(copy_checkpoint_side_files({base_dir}, out_dir));
  // The result must load: check it with the loader the runtime uses.
  auto check = open_model_source(cfg.output);
  if (!check.ok()) return check.status().with_context("the merged checkpoint does not load");
  std::fprintf(stderr, "merge-lora: %zu weights adapted (rank %lld, scale %g) into %s\n", lora->factors().size(),
               static_cast<long long>(lora->rank()), lora->scale(), cfg.output.c_str());
  return OkStatus();
}

}  // namespace

int cmd_merge_lora(int argc, char** argv) {
  CLI::App app{"Merge a PEFT LoRA adapter into a Hugging Face checkpoint (W + alpha/r * B.A)", "lancet merge-lora"};
  MergeConfig cfg;
  double max_shard_gb = 5.0;
  app.add_option("base", cfg.base, "HF checkpoint directory (F32/F16/BF16 weights)")->required();
  app.add_option("adapter", cfg.adapter, "PEFT adapter directory (adapter_config.json, adapter_model.safetensors)")
      ->required();
  app.add_option("output", cfg.output, "output directory")->required();
  app.add_option("--max-shard-size", max_shard_gb, "largest safetensors shard, GB")->capture_default_str();
  std::string dtype = "base";
  app.add_option("--dtype", dtype,
                 "dtype of the adapted weights: base (the base's, rounded to nearest even) or float32 (the exact "
                 "sum, as the adapter computes; other weights stay as they are)")
      ->check(CLI::IsMember({"base", "float32"}))
      ->capture_default_str();
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  if (!(max_shard_gb > 0)) {
    std::fprintf(stderr, "lancet merge-lora: --max-shard-size must be positive\n");
    return 2;
  }
  cfg.max_shard_bytes = static_cast<uint64_t>(max_shard_gb * (1ull << 30));
  cfg.f32_adapted = dtype == "float32";
  const Status st = merge(cfg);
  if (!st.ok()) {
    std::fprintf(stderr, "lancet merge-lora: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace lancet::cli
