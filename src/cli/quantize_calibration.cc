// Calibration prompts for `lancet quantize --calibrate` (text lines or JSON lines) and the
// calibration passes over the source model (KV / activation scales, GPTQ second moments).
#include "cli/quantize_calibration.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <sstream>

#include "backend/backend.h"
#include "core/logging.h"
#include "io/text_file.h"
#include "model/llama_model.h"
#include "tokenizer/model_tokenizer.h"

namespace lancet::cli {

StatusOr<std::vector<std::vector<int32_t>>> read_calibration_prompts(const std::string& path,
                                                                     const ModelSource& src) {
  ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  // The tokenizer is loaded only when a line needs it: token-id files work for models without one.
  bool tried_tokenizer = false;
  std::unique_ptr<Tokenizer> tok;
  auto encode = [&](const std::string& where, const std::string& s) -> StatusOr<std::vector<int32_t>> {
    if (!tried_tokenizer) {
      tried_tokenizer = true;
      ASSIGN_OR_RETURN(tok, load_model_tokenizer(src));
    }
    if (!tok)
      return InvalidArgument(where + ": a text prompt, but " + src.path() +
                             " has no tokenizer; give token ids as JSON lines {\"prompt_ids\": [...]}");
    return tok->encode(s, EncodeOptions{.parse_special = false, .add_bos = tok->add_bos_by_default()});
  };
  const int64_t vocab = src.config().vocab_size;
  std::vector<std::vector<int32_t>> out;
  std::stringstream ss(text);
  int64_t line_no = 0;
  for (std::string line; std::getline(ss, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] != '{') {
      ASSIGN_OR_RETURN(std::vector<int32_t> ids, encode(where, lancet::unescape_newlines(line)));
      out.push_back(std::move(ids));
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return InvalidArgument(where + ": a line starting with '{' must be a JSON object");
    if (const auto it = j.find("prompt_ids"); it != j.end()) {
      if (!it->is_array() || it->empty())
        return InvalidArgument(where + ": \"prompt_ids\" must be a non-empty array of token ids");
      std::vector<int32_t> ids;
      ids.reserve(it->size());
      for (const auto& v : *it) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
          return InvalidArgument(where + ": \"prompt_ids\" holds " + v.dump() + "; ids must be integers in [0, " +
                                 std::to_string(vocab) + ")");
        ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
      }
      out.push_back(std::move(ids));
    } else if (const auto p = j.find("prompt"); p != j.end() && p->is_string() && !p->get<std::string>().empty()) {
      ASSIGN_OR_RETURN(std::vector<int32_t> ids, encode(where, p->get<std::string>()));
      out.push_back(std::move(ids));
    } else {
      return InvalidArgument(where + ": a JSON line needs \"prompt\" (non-empty text) or \"prompt_ids\"");
    }
  }
  if (out.empty())
    return InvalidArgument(path + ": no calibration prompts (one per line: text, or JSON with \"prompt\" or "
                                  "\"prompt_ids\")");
  // A tokenizer may map text outside the model's embedding (a mismatched tokenizer.json).
  for (size_t i = 0; i < out.size(); ++i)
    for (int32_t id : out[i])
      if (id < 0 || id >= vocab)
        return InvalidArgument(path + ": prompt " + std::to_string(i + 1) + " encodes to id " + std::to_string(id) +
                               ", outside the model's vocabulary of " + std::to_string(vocab));
  return out;
}

StatusOr<KvScales> calibrate_checkpoint_kv_scales(const ModelSource& src, const CheckpointCalibration& cal,
                                                  ActivationScales* activations) {
  ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> prompts, read_calibration_prompts(cal.prompts_path, src));
  // The weights as stored (no FP8 rounding): the scales describe the model the checkpoint was
  // made from, as online calibration of the BF16 model would. Default options keep the rope
  // table the runtime builds for its default context length.
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, make_backend("cpu"));
  LlamaModelOptions mo;
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::create(src, *be, mo));
  KvCalibrationOptions co;
  co.margin = cal.margin;
  co.scratch_dtype = DType::kF32;
  int64_t tokens = 0, truncated = 0;
  for (const auto& p : prompts) {
    tokens += std::min<int64_t>(static_cast<int64_t>(p.size()), model->max_model_len());
    if (static_cast<int64_t>(p.size()) > model->max_model_len()) ++truncated;
  }
  if (truncated > 0)
    LOG_WARN("kv calibration: " << truncated << " prompt(s) cut to the model's " << model->max_model_len()
                                << " positions");
  ASSIGN_OR_RETURN(KvScales scales,
                   calibrate_kv_and_activation_scales(*model, *be, prompts, co,
                                                      cal.static_activations ? activations : nullptr));
  LOG_INFO("kv calibration: " << prompts.size() << " prompts, " << tokens << " tokens, margin " << cal.margin);
  return scales;
}

StatusOr<Fp8GptqFactors> calibrate_checkpoint_gptq(const ModelSource& src, const std::string& prompts_path,
                                                   Fp8GptqCalibrationStats* stats) {
  ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> prompts, read_calibration_prompts(prompts_path, src));
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, make_backend("cpu"));
  return calibrate_fp8_gptq(src, *be, prompts, Fp8GptqOptions{}, stats);
}

std::string kv_scale_tensor_name(int64_t layer, bool value) {
  return "model.layers." + std::to_string(layer) + ".self_attn." + (value ? "v_scale" : "k_scale");
}

}  // namespace lancet::cli
