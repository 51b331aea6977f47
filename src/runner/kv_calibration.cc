// FP8 KV scales: checkpoint lookup, the online calibration pass, the built-in text, and the
// process-wide record /metrics reads.
#include "runner/kv_calibration.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>

#include "core/dtype.h"
#include "core/logging.h"
#include "runner/llama_executor.h"
#include "runner/sequence_runner.h"

namespace lancet {
namespace {

// The value of a scale tensor (max over its entries), or an error naming it.
StatusOr<float> read_scale(const std::string& name, const TensorView& t) {
  const int64_t n = t.numel();
  if (n < 1 || n > 4096 || (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16))
    return InvalidArgument("kv scale '" + name + "' must hold f32/bf16/f16 values, got " + dtype_name(t.dtype) +
                           " " + shape_to_string(t.shape));
  if (t.nbytes < static_cast<uint64_t>(n) * dtype_info(t.dtype).block_bytes)
    return InvalidArgument("kv scale '" + name + "' is shorter than its shape");
  std::vector<float> v(n);
  convert_to_f32(t.dtype, t.data, v.data(), n);
  float m = 0.f;
  for (float x : v) {
    if (!std::isfinite(x) || !(x > 0.f))
      return InvalidArgument("kv scale '" + name + "' holds " + std::to_string(x) + "; scales must be finite and positive");
    m = std::max(m, x);
  }
  return m;
}

// The first of `names` the source has, or null.
const TensorView* find_any(const ModelSource& src, const std::vector<std::string>& names, std::string* found) {
  for (const std::string& n : names) {
    if (const TensorView* t = src.find(n)) {
      *found = n;
      return t;
    }
  }
  return nullptr;
}

std::mutex g_published_mu;
std::optional<KvScales> g_published;

}  // namespace

StatusOr<std::optional<KvScales>> kv_scales_from_checkpoint(const ModelSource& src) {
  const int64_t L = src.config().num_layers;
  KvScales out;
  out.source = "checkpoint";
  int64_t have = 0;
  std::string first_missing;
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    std::string kname, vname;
    const TensorView* k = find_any(src, {p + "k_scale", p + "attn.k_scale", p + "kv_scale"}, &kname);
    const TensorView* v = find_any(src, {p + "v_scale", p + "attn.v_scale", p + "kv_scale"}, &vname);
    if (!k || !v) {
      if (first_missing.empty()) first_missing = p + (k ? "v_scale" : "k_scale");
      continue;
    }
    ++have;
    ASSIGN_OR_RETURN(float ks, read_scale(kname, *k));
    ASSIGN_OR_RETURN(float vs, read_scale(vname, *v));
    out.k.push_back(ks);
    out.v.push_back(vs);
  }
  if (have == 0) return std::optional<KvScales>();
  if (have != L)
    return InvalidArgument(src.path() + ": KV cache scales for " + std::to_string(have) + " of " + std::to_string(L) +
                           " layers (missing " + first_missing + ")");
  return std::optional<KvScales>(std::move(out));
}

KvScales kv_scales_from_absmax(const std::vector<float>& k_absmax, const std::vector<float>& v_absmax, float margin) {
  KvScales s;
  s.source = "calibration";
  for (float a : k_absmax) s.k.push_back(fp8_scale_from_absmax(a, margin));
  for (float a : v_absmax) s.v.push_back(fp8_scale_from_absmax(a, margin));
  return s;
}

StatusOr<KvScales> calibrate_kv_scales(LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                       const KvCalibrationOptions& opts, LinearInputObserver* activations) {
  if (!(opts.margin >= 1.f && opts.margin <= 16.f))
    return InvalidArgument("kv calibration: margin must be in [1, 16]");
  const int64_t max_len = model.max_model_len();
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, std::min<int64_t>(p.size(), max_len));
  if (longest == 0) return InvalidArgument("kv calibration: no calibration tokens");
  const int32_t bs = opts.block_size;
  LlamaExecutorOptions eo;
  eo.decode_graphs = false;
  ASSIGN_OR_RETURN(auto scratch, LlamaExecutor::create(model, KvBlockConfig{(longest + bs - 1) / bs, bs},
                                                       opts.scratch_dtype, eo));
  SequenceRunner seq(*scratch);
  KvAbsmaxObserver obs;
  obs.k_absmax.assign(model.config().num_layers, 0.f);
  obs.v_absmax.assign(model.config().num_layers, 0.f);
  model.set_kv_observer(&obs);
  if (activations) model.set_activation_observer(activations);
  Status st = OkStatus();
  std::vector<float> logits;
  for (const auto& p : prompts) {
    const int64_t n = std::min<int64_t>(p.size(), max_len);
    if (n == 0) continue;
    seq.reset();
    st = seq.step_last(std::span<const int32_t>(p.data(), n), &logits, /*want_logits=*/false);
    if (!st.ok()) break;
  }
  model.set_kv_observer(nullptr);
  model.set_activation_observer(nullptr);
  if (!st.ok()) return st.with_context("kv calibration");
  if (obs.saw_non_finite) return FailedPrecondition("kv calibration: the model produced non-finite keys or values");
  if (activations && activations->saw_non_finite())
    return FailedPrecondition("activation calibration: the model produced non-finite activations");
  KvScales s = kv_scales_from_absmax(obs.k_absmax, obs.v_absmax, opts.margin);
  LOG_DEBUG("kv calibration: " << obs.tokens << " tokens, margin " << opts.margin);
  return s;
}

std::vector<int32_t> kv_calibration_random_tokens(int64_t vocab_size, int64_t count) {
  std::vector<int32_t> out;
  if (vocab_size <= 0) return out;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < count; ++i) {
    x ^= x << 13;  // xorshift64: fixed sequence, no dependence on the standard library's engines
    x ^= x >> 7;
    x ^= x << 17;
    out.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(vocab_size)));
  }
  return out;
}

void publish_kv_cache_scales(const KvScales& scales) {
  std::lock_guard<std::mutex> lock(g_published_mu);
  g_published = scales;
}

std::optional<KvScales> published_kv_cache_scales() {
  std::lock_guard<std::mutex> lock(g_published_mu);
  return g_published;
}

std::string format_kv_scales(const KvScales& s) {
  std::ostringstream o;
  o.precision(4);
  o << "k [";
  for (size_t i = 0; i < s.k.size(); ++i) o << (i ? " " : "") << s.k[i];
  o << "] v [";
  for (size_t i = 0; i < s.v.size(); ++i) o << (i ? " " : "") << s.v[i];
  o << "]";
  return o.str();
}

std::string_view kv_calibration_text() {
  // Written for this purpose: varied everyday English, some technical prose, a few numbers and
  // a code fragment, so keys and values see a spread of token kinds and positions.
  static constexpr std::string_view kText =
      "The old lighthouse stood at the end of a narrow spit of land, where the river met the sea. "
      "Every evening, long before the streetlights of the town came on, the keeper climbed the one "
      "hundred and twelve steps to the lamp room, wiped the salt from the glass, and checked the oil. "
      "Ships no longer needed the light the way they once had; most of them carried receivers that "
      "told them their position to within a few meters. Still, the harbor council voted every spring "
      "to keep it burning, partly out of habit and partly because fishermen said the beam felt like "
      "someone waiting for them to come home.\n\n"
      "In March the weather turned. A storm pushed water over the sea wall, flooded the bakery on "
      "Mill Street, and knocked out power for two days. Neighbors shared generators, soup, and "
      "batteries. The school opened its gym as a shelter, and children slept on gymnastics mats "
      "while their parents talked quietly about insurance, roofs, and whether the bridge would hold.\n\n"
      "Questions people asked the library's help desk that week included: How do I dry out a wet "
      "passport? What is the difference between a watch and a warning? Can I claim the cost of a "
      "hotel room on my taxes? The librarian answered each one patiently and wrote the best answers "
      "on a whiteboard by the door.\n\n"
      "Later, an engineer from the county explained the repair plan at a public meeting. The sea "
      "wall would be raised by 0.8 meters over 1,450 meters of shoreline, at an estimated cost of "
      "$3.2 million, with 60% paid by the state. Construction would start in September and finish "
      "by the end of next year, weather permitting.\n\n"
      "To track the water level, a student wrote a small program:\n"
      "def average_level(readings):\n"
      "    total = sum(r.height for r in readings if r.valid)\n"
      "    count = len([r for r in readings if r.valid])\n"
      "    return total / count if count else None\n\n"
      "She posted the results online every morning, and by summer hundreds of people checked them "
      "with their coffee. When the first autumn storm arrived, the new wall held, the bakery stayed "
      "dry, and the light at the end of the spit kept turning, as it always had.";
  return kText;
}

std::string_view kv_calibration_chat_json() {
  static constexpr std::string_view kChat = R"([
    {"role": "system", "content": "You are a helpful assistant. Answer clearly and briefly."},
    {"role": "user", "content": "Can you explain why the sky looks blue during the day but red at sunset?"},
    {"role": "assistant", "content": "Sunlight contains every color. Air molecules scatter short blue wavelengths much more than long red ones, so blue light reaches your eyes from all over the sky. At sunset the light crosses far more air, most of the blue is scattered away before it arrives, and the remaining reds and oranges dominate."},
    {"role": "user", "content": "Thanks! Write a two-line poem about it, then list three facts about the ocean."}
  ])";
  return kChat;
}

}  // namespace lancet
