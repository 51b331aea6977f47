// libFuzzer target for the chat-template sandbox. The input is a template, optionally followed
// by "\n#messages\n" and a JSON list of messages (else a fixed conversation is used). Compile
// and render must succeed or fail with a Status, never crash or hang: the limits are small
// here so that the operation budget, output cap, recursion and nesting limits are hit often,
// and the rendered text must respect the output cap.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template/chat_template.h"

namespace {

constexpr std::string_view kSeparator = "\n#messages\n";

const nlohmann::ordered_json& default_messages() {
  static const auto* m = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And [1, 2, 3] | sum? \u00e9\ud83d\ude00"}])"));
  return *m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find(kSeparator);
  nlohmann::ordered_json messages = default_messages();
  if (sep != std::string_view::npos) {
    messages = nlohmann::ordered_json::parse(input.substr(sep + kSeparator.size()), nullptr, /*allow_exceptions=*/false);
    if (messages.is_discarded()) return 0;
  }
  lancet::TemplateLimits limits;
  limits.max_operations = 20'000;
  limits.max_output_bytes = 64 << 10;
  limits.max_recursion_depth = 16;
  limits.max_nesting_depth = 64;
  limits.max_range = 1'000;
  auto tmpl = lancet::ChatTemplate::compile(std::string(input.substr(0, sep)), limits);
  if (!tmpl.ok()) return 0;
  lancet::ChatTemplateOptions opt;
  opt.bos_token = "<|begin_of_text|>";
  opt.eos_token = "<|eot_id|>";
  auto text = lancet::apply_chat_template(*tmpl, messages, opt);
  if (text.ok() && text->size() > limits.max_output_bytes) std::abort();
  return 0;
}
