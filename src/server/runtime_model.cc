// ServingModel over runtime/Runtime: the production adapter used by `lancet serve`.
#include <mutex>

#include "runtime/runtime.h"
#include "server/serving_model.h"
#include "tokenizer/tokenizer.h"

namespace lancet::server {
namespace {

class RuntimeModel : public ServingModel {
 public:
  explicit RuntimeModel(Runtime* rt) : rt_(rt) {}
  std::string name() const override { return rt_->model_name(); }
  int64_t max_model_len() const override { return rt_->max_model_len(); }
  int64_t vocab_size() const override { return rt_->vocab_size(); }
  bool has_tokenizer() const override { return rt_->tokenizer() != nullptr; }
  bool has_chat_template() const override { return rt_->tokenizer() != nullptr && rt_->has_chat_template(); }

  StatusOr<std::vector<int32_t>> encode(const std::string& text, bool add_special_tokens) const override {
    if (!rt_->tokenizer()) return InvalidArgument("this model has no tokenizer; send token ids");
    if (add_special_tokens) return rt_->encode_prompt(text);
    return rt_->tokenizer()->encode(text);
  }
  StatusOr<std::vector<int32_t>> encode_chat(const nlohmann::ordered_json& messages,
                                             const ChatEnding& ending) const override {
    if (!has_chat_template()) return InvalidArgument("this model has no tokenizer or chat template");
    ChatTemplateOptions opt;
    opt.add_generation_prompt = ending.add_generation_prompt;
    opt.continue_final_message = ending.continue_final_message;
    return rt_->encode_chat(messages, opt);
  }
  StatusOr<std::vector<int32_t>> encode_chat_with_tools(const nlohmann::ordered_json& messages,
                                                        const nlohmann::ordered_json& tools,
                                                        const ChatEnding& ending) const override {
    if (!has_chat_template()) return InvalidArgument("this model has no tokenizer or chat template");
    if (!template_handles_tools(rt_->chat_template_source()))
      return encode_chat(fallback_tool_messages(messages, tools), ending);
    ChatTemplateOptions opt;
    opt.add_generation_prompt = ending.add_generation_prompt;
    opt.continue_final_message = ending.continue_final_message;
    opt.tools = tools;
    return rt_->encode_chat(messages, opt);
  }
  std::string decode(std::span<const int32_t> ids) const override {
    return rt_->tokenizer() ? rt_->tokenizer()->decode(ids) : std::string();
  }
  std::string token_text(int32_t id) const override { return rt_->token_text(id); }
  AsyncEngine& engine() override { return rt_->async_engine(); }
  structured::ConstraintCache* structured_outputs() override {
    std::call_once(structured_once_, [this] {
      const Tokenizer* tok = rt_->tokenizer();
      if (!tok) return;
      // Each id's real bytes; special tokens have none (a grammar never allows them).
      std::vector<std::string> bytes(static_cast<size_t>(rt_->vocab_size()));
      for (int32_t id = 0; id < static_cast<int32_t>(bytes.size()); ++id)
        if (!tok->is_special(id)) bytes[static_cast<size_t>(id)] = std::string(tok->token_bytes(id));
      structured_ = std::make_unique<structured::ConstraintCache>(
          std::make_shared<structured::TokenTrie>(std::move(bytes)));
    });
    return structured_.get();
  }
  bool adapters_enabled() const override { return rt_->lora_enabled(); }
  std::vector<Adapter> adapters() const override {
    std::vector<Adapter> out;
    for (const LoraRegistry::Entry& e : rt_->lora_adapters()) out.push_back({e.name, e.path});
    return out;
  }
  std::shared_ptr<const LoraRef> find_adapter(const std::string& name) const override { return rt_->find_lora(name); }
  Status load_adapter(const std::string& name, const std::string& path) override { return rt_->load_lora(name, path); }
  Status unload_adapter(const std::string& name) override { return rt_->unload_lora(name); }

 private:
  Runtime* rt_;
  std::once_flag structured_once_;
  std::unique_ptr<structured::ConstraintCache> structured_;
};

}  // namespace

std::unique_ptr<ServingModel> make_runtime_model(Runtime* runtime) {
  return std::make_unique<RuntimeModel>(runtime);
}

}  // namespace lancet::server
