// What the HTTP layer needs from a loaded model: its name and limits, prompt encoding (text
// and chat), token texts for logprobs, and the AsyncEngine to submit to. RuntimeModel adapts
// runtime/Runtime; tests adapt an Engine over a fake executor, so the server can be tested
// without weights.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/async_engine.h"
#include "engine/lora_ref.h"
#include "server/tool_prompt.h"
#include "structured/constraint_cache.h"

namespace lancet {
class Runtime;
}

namespace lancet::server {

// How a rendered chat ends: with the header that opens the assistant's reply (the chat
// template's add_generation_prompt), or with the final message left open for the model to
// continue (vLLM's continue_final_message; ChatTemplateOptions).
struct ChatEnding {
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};

class ServingModel {
 public:
  virtual ~ServingModel() = default;
  virtual std::string name() const = 0;
  virtual int64_t max_model_len() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual bool has_tokenizer() const = 0;
  virtual bool has_chat_template() const = 0;
  // Text -> ids (with the model's BOS when add_special_tokens and the model wants one).
  virtual StatusOr<std::vector<int32_t>> encode(const std::string& text, bool add_special_tokens) const = 0;
  // Messages [{role, content}] -> prompt ids through the chat template.
  virtual StatusOr<std::vector<int32_t>> encode_chat(const nlohmann::ordered_json& messages,
                                                     const ChatEnding& ending) const = 0;
  // With the request's tools (null: none): a template that handles tools gets them as its
  // `tools` variable; others render fallback_tool_messages (tool_prompt.h), as here.
  virtual StatusOr<std::vector<int32_t>> encode_chat_with_tools(const nlohmann::ordered_json& messages,
                                                                const nlohmann::ordered_json& tools,
                                                                const ChatEnding& ending) const {
    return encode_chat(fallback_tool_messages(messages, tools), ending);
  }
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual std::string token_text(int32_t id) const = 0;
  virtual AsyncEngine& engine() = 0;
  // Structured outputs over this model's vocabulary (built on first use); null when the model
  // has no tokenizer, and structured requests are then refused.
  virtual structured::ConstraintCache* structured_outputs() { return nullptr; }

  // ---- LoRA adapters, served under their own model names (runtime/lora_registry.h) ----
  struct Adapter {
    std::string name, path;
  };
  virtual bool adapters_enabled() const { return false; }
  virtual std::vector<Adapter> adapters() const { return {}; }
  // The adapter served as `name`; null when none is.
  virtual std::shared_ptr<const LoraRef> find_adapter(const std::string& name) const {
    (void)name;
    return nullptr;
  }
  virtual Status load_adapter(const std::string& name, const std::string& path) {
    (void)name;
    (void)path;
    return FailedPrecondition("LoRA adapters are not enabled (start the server with --enable-lora or --lora-modules)");
  }
  virtual Status unload_adapter(const std::string& name) {
    (void)name;
    return FailedPrecondition("LoRA adapters are not enabled (start the server with --enable-lora or --lora-modules)");
  }
};

// Serves a Runtime (which must outlive the adapter).
std::unique_ptr<ServingModel> make_runtime_model(Runtime* runtime);

}  // namespace lancet::server
