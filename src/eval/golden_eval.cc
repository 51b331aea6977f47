// eval_golden_case: prompt (optionally chunked) -> logits at stored positions -> greedy decode.
#include "eval/golden_eval.h"

#include "runner/llama_executor.h"
#include "runner/sequence_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace lancet {

namespace {

StatusOr<std::vector<int32_t>> read_i32(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  if (!t) return NotFound(f.path() + ": missing " + name);
  if (t->dtype != DType::kI32) return InvalidArgument(f.path() + ": " + name + " must be I32");
  std::vector<int32_t> v(t->numel());
  std::memcpy(v.data(), t->data, v.size() * sizeof(int32_t));
  return v;
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;  // first maximum, as torch.argmax
  return best;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

StatusOr<std::vector<GoldenCase>> read_golden_cases(const std::string& path) {
  std::filesystem::path p(path);
  p.replace_extension(".json");
  std::ifstream in(p);
  if (!in) return NotFound("cannot open " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.contains("cases") || !j["cases"].is_array())
    return InvalidArgument(p.string() + ": expected {\"cases\": [...]}");
  std::vector<GoldenCase> out;
  for (const auto& c : j["cases"]) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || !c.contains("prompt_len") ||
        !c["prompt_len"].is_number_integer() || !c.contains("greedy_steps") ||
        !c["greedy_steps"].is_number_integer())
      return InvalidArgument(p.string() + ": each case needs name, prompt_len, greedy_steps");
    out.push_back({c["name"].get<std::string>(), c["prompt_len"].get<int64_t>(), c["greedy_steps"].get<int64_t>()});
  }
  return out;
}

StatusOr<GoldenCaseResult> eval_golden_case(LlamaModel& model, Backend& backend, const SafetensorsFile& golden,
                                            const GoldenCase& gc, const GoldenEvalOptions& opts) {
  const int64_t V = model.config().vocab_size;
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, read_i32(golden, gc.name + ".input_ids"));
  ASSIGN_OR_RETURN(std::vector<int32_t> positions, read_i32(golden, gc.name + ".positions"));
  ASSIGN_OR_RETURN(std::vector<int32_t> greedy, read_i32(golden, gc.name + ".greedy"));
  const TensorView* ref = golden.find(gc.name + ".logits");
  if (!ref || ref->dtype != DType::kF32 || ref->shape.size() != 2 ||
      ref->shape[0] != static_cast<int64_t>(positions.size()) || ref->shape[1] != V)
    return InvalidArgument(golden.path() + ": " + gc.name + ".logits must be F32 [positions, vocab]");
  const int64_t L = static_cast<int64_t>(ids.size());
  if (L == 0) return InvalidArgument(golden.path() + ": " + gc.name + " has an empty prompt");
  for (size_t i = 0; i < positions.size(); ++i)
    if (positions[i] < 0 || positions[i] >= L || (i > 0 && positions[i] <= positions[i - 1]))
      return InvalidArgument(golden.path() + ": " + gc.name + ".positions must increase within the prompt");
  const int64_t steps = static_cast<int64_t>(greedy.size());
  const int64_t total = L + steps;
  if (total > model.max_model_len())
    return OutOfRange(gc.name + ": needs " + std::to_string(total) + " positions, model built for " +
                      std::to_string(model.max_model_len()));
  const int64_t bs = opts.block_size;
  LlamaExecutorOptions eo;
  eo.decode_graphs = false;
  ASSIGN_OR_RETURN(auto exec, LlamaExecutor::create(model, KvBlockConfig{(total + bs - 1) / bs + 1,
                                                                         static_cast<int32_t>(bs)},
                                                    opts.kv_dtype, eo));
  SequenceRunner seq(*exec);
  seq.set_lora_slot(opts.lora_slot);

  // Prompt: logits at the stored positions plus the last one (which seeds the greedy run).
  std::vector<int32_t> want = positions;
  if (want.back() != L - 1) want.push_back(static_cast<int32_t>(L - 1));
  std::vector<float> got(want.size() * V);
  const int64_t chunk = opts.prefill_chunk > 0 ? opts.prefill_chunk : L;
  auto t0 = std::chrono::steady_clock::now();
  size_t wi = 0;
  for (int64_t start = 0; start < L; start += chunk) {
    const int64_t n = std::min(chunk, L - start);
    std::vector<int32_t> offsets;
    const size_t first = wi;
    while (wi < want.size() && want[wi] < start + n) offsets.push_back(want[wi++] - static_cast<int32_t>(start));
    std::vector<float> lg;
    if (!offsets.empty()) {
      RETURN_IF_ERROR(seq.step(std::span<const int32_t>(ids.data() + start, n), offsets, &lg));
    } else {
      RETURN_IF_ERROR(seq.step_last(std::span<const int32_t>(ids.data() + start, n), &lg, false));
    }
    std::copy(lg.begin(), lg.end(), got.begin() + first * V);
  }
  GoldenCaseResult r;
  r.name = gc.name;
  r.prompt_len = L;
  r.num_positions = static_cast<int64_t>(positions.size());
  r.prefill_seconds = seconds_since(t0);
  const float* refp = static_cast<const float*>(ref->data);
  for (size_t p = 0; p < positions.size(); ++p) {
    const float* a = got.data() + p * V;
    const float* b = refp + p * V;
    double dot = 0, na = 0, nb = 0;
    for (int64_t i = 0; i < V; ++i) {
      r.max_abs_err = std::max(r.max_abs_err, std::fabs(static_cast<double>(a[i]) - b[i]));
      r.max_abs_ref = std::max(r.max_abs_ref, std::fabs(static_cast<double>(b[i])));
      dot += static_cast<double>(a[i]) * b[i];
      na += static_cast<double>(a[i]) * a[i];
      nb += static_cast<double>(b[i]) * b[i];
    }
    r.min_cosine = std::min(r.min_cosine, dot / std::sqrt(std::max(na * nb, 1e-300)));
    if (argmax(a, V) == argmax(b, V)) ++r.top1_agree;
  }
  r.rel_err = r.max_abs_ref > 0 ? r.max_abs_err / r.max_abs_ref : r.max_abs_err;

  // Greedy continuation, one token per step through the cache.
  r.greedy_total = steps;
  auto t1 = std::chrono::steady_clock::now();
  int32_t next = static_cast<int32_t>(argmax(got.data() + (want.size() - 1) * V, V));
  bool matching = true;
  for (int64_t i = 0; i < steps; ++i) {
    if (matching && next == greedy[i]) ++r.greedy_match; else matching = false;
    if (i + 1 == steps) break;
    std::vector<float> lg;
    RETURN_IF_ERROR(seq.step_last(std::span<const int32_t>(&next, 1), &lg));
    next = static_cast<int32_t>(argmax(lg.data(), V));
  }
  r.decode_seconds = seconds_since(t1);
  return r;
}

}  // namespace lancet
