// Chat templates: the Jinja programs in tokenizer_config.json / GGUF metadata that turn a list
// of messages into prompt text. They run in a sandboxed interpreter (no host objects, no
// underscore attributes, an operation budget, output and recursion caps) with the settings
// transformers' apply_chat_template uses (trim_blocks, lstrip_blocks, raise_exception,
// strftime_now, tojson keeping key order), so prompts match Hugging Face byte for byte.
//
//   ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::compile(source));
//   ChatTemplateOptions opt;  opt.bos_token = "<|begin_of_text|>";
//   ASSIGN_OR_RETURN(std::string prompt, apply_chat_template(t, messages, opt));
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace lancet {

struct TemplateLimits {
  uint64_t max_operations = 10'000'000;  // expression/statement evaluations per render
  size_t max_output_bytes = 4u << 20;    // rendered text, and any single string or list built
  int max_recursion_depth = 64;          // nested macro calls
  int max_nesting_depth = 200;           // syntactic nesting (parentheses, blocks)
  int64_t max_range = 100'000;           // largest range() (Jinja's sandbox MAX_RANGE)
  int max_input_depth = 64;              // nesting of the JSON context passed to render()
};

class ChatTemplate {
 public:
  // Parses the template; syntax errors (with line and column), unknown filters and unknown
  // tests are InvalidArgument.
  static StatusOr<ChatTemplate> compile(std::string source, TemplateLimits limits = {});

  // Renders with the top-level keys of `context` as variables. Thread-safe. Errors:
  // InvalidArgument (bad template operation, raise_exception, sandbox violation),
  // ResourceExhausted (a limit was hit); messages carry the line and column.
  // ordered_json keeps object key order (what tojson prints); nlohmann::json sorts keys.
  StatusOr<std::string> render(const nlohmann::ordered_json& context) const;
  StatusOr<std::string> render(const nlohmann::json& context) const;

  const std::string& source() const;

 private:
  struct Compiled;
  explicit ChatTemplate(std::shared_ptr<const Compiled> c) : impl_(std::move(c)) {}
  std::shared_ptr<const Compiled> impl_;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // The final message left open for the model to continue (transformers' and vLLM's
  // continue_final_message): the rendering is cut right after that message's text (its last
  // text part when the content is a list), so whatever the template puts after it (an
  // end-of-turn token) is gone. Excludes add_generation_prompt.
  bool continue_final_message = false;
  std::string bos_token;
  std::string eos_token;
  // Tool (function) specs in OpenAI form, or null. Passed as `tools` (None when null), as
  // transformers does.
  nlohmann::ordered_json tools = nullptr;
  // More variables: date_string, tools_in_user_message, builtin_tools, custom ones. They
  // override the ones above when names clash.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
};

// Renders `messages` (a JSON array of {role, content, ...}) the way transformers'
// apply_chat_template(tokenize=False) does: variables messages, tools, documents (None),
// add_generation_prompt, bos_token, eos_token and the extra context.
StatusOr<std::string> apply_chat_template(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                          const ChatTemplateOptions& options);
StatusOr<std::string> apply_chat_template(const ChatTemplate& tmpl, const nlohmann::json& messages,
                                          const ChatTemplateOptions& options);

// A Llama 3 format template for models that ship none. For string contents it renders
// exactly like the template in Meta's Llama 3 Instruct tokenizer_config.json.
const char* builtin_llama3_template();

}  // namespace lancet
