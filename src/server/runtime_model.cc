// ServingModel over runtime/Runtime: the production adapter used by `lancet serve`.
#include "runtime/runtime.h"
#include "server/serving_model.h"

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
                                             bool add_generation_prompt) const override {
    if (!has_chat_template()) return InvalidArgument("this model has no tokenizer or chat template");
    ChatTemplateOptions opt;
    opt.add_generation_prompt = add_generation_prompt;
    return rt_->encode_chat(messages, opt);
  }
  std::string decode(std::span<const int32_t> ids) const override {
    return rt_->tokenizer() ? rt_->tokenizer()->decode(ids) : std::string();
  }
  std::string token_text(int32_t id) const override { return rt_->token_text(id); }
  AsyncEngine& engine() override { return rt_->async_engine(); }

 private:
  Runtime* rt_;
};

}  // namespace

std::unique_ptr<ServingModel> make_runtime_model(Runtime* runtime) {
  return std::make_unique<RuntimeModel>(runtime);
}

}  // namespace lancet::server
