// The guard model (`lancet serve --guard-model PATH`): a second model in the process that
// classifies what the content rules (--guard-rules) let through, as Llama Guard does. A prompt
// is sent to it as a conversation and its greedy answer read: first line "safe" or "unsafe",
// then (unsafe) a comma-separated list of the violated categories. A model whose chat template
// is a guard's (it renders the safety task itself: Llama Guard's) gets the conversation's
// messages; any other model gets the task written out as one user message
// (guard_task_text: Llama Guard 3's instructions and categories S1-S14). With the model's
// tokenizer the answer is generated under a grammar of that form, so every model's answer reads
// as a verdict.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "server/serving_model.h"

namespace lancet::server {

struct GuardVerdict {
  enum class Kind { kSafe, kUnsafe, kUnknown };
  Kind kind = Kind::kUnknown;
  std::vector<std::string> categories;  // unsafe: as the model wrote them (e.g. "S1")
  std::string answer;                   // the model's answer (at most 200 bytes), for logs
  double seconds = 0;
};

const char* verdict_name(GuardVerdict::Kind k);

// Reads a guard's answer: the first non-empty line (case and surrounding space ignored) is
// "safe" or "unsafe"; after "unsafe" the next non-empty line lists categories. Anything else
// is kUnknown.
GuardVerdict parse_guard_answer(std::string_view answer);

// The safety task for a model whose template does not write it: Llama Guard 3's prompt with
// the conversation's user and assistant turns (content as text), assessing the last user turn
// (or the last assistant turn, when the conversation ends with one).
std::string guard_task_text(const nlohmann::ordered_json& conversation);

struct GuardModelConfig {
  int32_t max_answer_tokens = 20;
  double timeout_s = 60;  // per classification
};

// Classifies through one ServingModel (which must outlive it). Thread-safe: each call is a
// request of its own to the model's engine.
class GuardModel {
 public:
  GuardModel(ServingModel* model, GuardModelConfig config = {});
  virtual ~GuardModel() = default;

  const std::string& name() const { return name_; }
  // Whether the model's chat template writes the safety task itself (found once, at start, by
  // rendering a probe conversation and looking for the task's wording).
  bool template_is_guard() const { return template_is_guard_; }
  // conversation: [{role: user|assistant|system|tool, content: string}]; only user and
  // assistant turns with text are classified. An error when the guard cannot answer (its
  // context too short even for the last turn, an engine error, the timeout).
  virtual StatusOr<GuardVerdict> classify(const nlohmann::ordered_json& conversation) const;

 protected:
  GuardModel() = default;  // for test doubles

 private:
  StatusOr<std::vector<int32_t>> encode(const nlohmann::ordered_json& turns) const;

  ServingModel* model_ = nullptr;
  GuardModelConfig config_;
  std::string name_;
  bool template_is_guard_ = false;
};

}  // namespace lancet::server
