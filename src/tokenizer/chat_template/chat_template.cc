// Public chat-template API: compile = lex + parse + name checks; render = convert the JSON
// context into values and run the interpreter. Interpreter errors (exceptions inside the
// library) become Status values here, with the template position in the message.
#include "tokenizer/chat_template/chat_template.h"

#include <type_traits>

#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/lexer.h"
#include "tokenizer/chat_template/parser.h"

namespace lancet {

struct ChatTemplate::Compiled {
  std::string source;
  TemplateLimits limits;
  jinja::Body body;
};

namespace {

using jinja::TemplateError;

Status to_status(const TemplateError& e, const char* what) {
  std::string msg = std::string(what);
  if (e.pos.line > 0) {
    msg += " at line " + std::to_string(e.pos.line) + ", column " + std::to_string(e.pos.col);
  }
  msg += ": ";
  msg += e.what();
  return Status(e.code, msg);
}

// Jinja rejects unknown filters and tests when compiling; so do we, so a broken template
// fails at load time rather than on some request.
void check_names(const jinja::Expr* e) {
  if (!e) return;
  if (e->kind == jinja::ExprKind::kFilter && !jinja::has_filter(e->name)) {
    jinja::fail("no filter named '" + e->name + "'", e->pos);
  }
  if (e->kind == jinja::ExprKind::kTest && !jinja::has_test(e->name)) {
    jinja::fail("no test named '" + e->name + "'", e->pos);
  }
  for (const auto& a : e->args) check_names(a.get());
  for (const auto& [k, v] : e->kwargs) check_names(v.get());
}

void check_names(const jinja::Body& body) {
  for (const auto& s : body) {
    check_names(s->expr.get());
    check_names(s->cond.get());
    for (const auto& [cond, b] : s->branches) {
      check_names(cond.get());
      check_names(b);
    }
    for (const auto& p : s->params) check_names(p.default_value.get());
    check_names(s->body);
    check_names(s->else_body);
  }
}

template <typename Json>
StatusOr<std::string> render_impl(const TemplateLimits& limits, const jinja::Body& body, const Json& context) {
  if (!context.is_object()) return InvalidArgument("chat template context must be a JSON object");
  try {
    jinja::DictData vars;
    for (auto it = context.begin(); it != context.end(); ++it) {
      vars.set(it.key(), jinja::from_json(it.value(), limits.max_input_depth));
    }
    jinja::Limits l;
    l.max_operations = limits.max_operations;
    l.max_output_bytes = limits.max_output_bytes;
    l.max_call_depth = limits.max_recursion_depth;
    l.max_range = limits.max_range;
    jinja::Interpreter in(l, vars);
    return in.render(body);
  } catch (const TemplateError& e) {
    return to_status(e, "chat template error");
  } catch (const std::exception& e) {
    return Internal(std::string("chat template render failed: ") + e.what());
  }
}

// The rendering cut right after the final message's text, as transformers does it: the text
// trimmed is looked up from the end, and kept with its leading spacing dropped when the template
// preserved the rest of it verbatim, else trimmed (templates often trim content).
template <typename Json>
StatusOr<std::string> cut_after_final_message(const std::string& text, const Json& messages) {
  if (messages.empty() || !messages.back().is_object()) return InvalidArgument("continue_final_message: no final message");
  const auto& last = messages.back();
  const auto content = last.find("content");
  std::string final_text;
  bool found = false;
  if (content != last.end() && content->is_string()) {
    final_text = content->template get<std::string>();
    found = true;
  } else if (content != last.end() && content->is_array()) {
    for (auto it = content->rbegin(); it != content->rend(); ++it) {
      if (!it->is_object()) continue;
      const auto t = it->find("text");
      if (t == it->end() || !t->is_string()) continue;
      final_text = t->template get<std::string>();
      found = true;
      break;
    }
  }
  if (!found) return InvalidArgument("continue_final_message: the final message has no text to continue");
  constexpr const char* kSpace = " \t\n\r\f\v";
  const size_t b = final_text.find_first_not_of(kSpace);
  const std::string lstripped = b == std::string::npos ? std::string() : final_text.substr(b);
  const size_t e = lstripped.find_last_not_of(kSpace);
  const std::string stripped = e == std::string::npos ? std::string() : lstripped.substr(0, e + 1);
  const size_t at = text.rfind(stripped);
  if (stripped.empty() || at == std::string::npos)
    return InvalidArgument("continue_final_message: the final message does not appear in the rendered chat");
  const bool verbatim = text.compare(at, lstripped.size(), lstripped) == 0;
  return text.substr(0, at + (verbatim ? lstripped.size() : stripped.size()));
}

template <typename Json>
StatusOr<std::string> apply_impl(const ChatTemplate& t, const Json& messages, const ChatTemplateOptions& o) {
  if (!messages.is_array()) return InvalidArgument("chat messages must be a JSON array");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if constexpr (std::is_same_v<Json, nlohmann::ordered_json>) {
    ctx["messages"] = messages;
  } else {
    ctx["messages"] = nlohmann::ordered_json::parse(messages.dump());  // keys already sorted
  }
  ctx["tools"] = o.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = o.add_generation_prompt;
  ctx["bos_token"] = o.bos_token;
  ctx["eos_token"] = o.eos_token;
  if (!o.extra_context.is_null()) {
    if (!o.extra_context.is_object()) return InvalidArgument("chat template extra_context must be a JSON object");
    for (auto it = o.extra_context.begin(); it != o.extra_context.end(); ++it) ctx[it.key()] = it.value();
  }
  if (!o.continue_final_message) return t.render(ctx);
  if (o.add_generation_prompt)
    return InvalidArgument("continue_final_message and add_generation_prompt cannot both be set");
  ASSIGN_OR_RETURN(std::string text, t.render(ctx));
  return cut_after_final_message(text, messages);
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::compile(std::string source, TemplateLimits limits) {
  auto c = std::make_shared<Compiled>();
  c->limits = limits;
  try {
    jinja::LexOptions lex;  // trim_blocks + lstrip_blocks, as transformers configures Jinja
    c->body = jinja::parse_template(jinja::tokenize(source, lex), limits.max_nesting_depth);
    check_names(c->body);
  } catch (const TemplateError& e) {
    return to_status(e, "chat template syntax error");
  }
  c->source = std::move(source);
  return ChatTemplate(std::move(c));
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render_impl(impl_->limits, impl_->body, context);
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::json& context) const {
  return render_impl(impl_->limits, impl_->body, context);
}

const std::string& ChatTemplate::source() const { return impl_->source; }

StatusOr<std::string> apply_chat_template(const ChatTemplate& t, const nlohmann::ordered_json& messages,
                                          const ChatTemplateOptions& o) {
  return apply_impl(t, messages, o);
}

StatusOr<std::string> apply_chat_template(const ChatTemplate& t, const nlohmann::json& messages,
                                          const ChatTemplateOptions& o) {
  return apply_impl(t, messages, o);
}

const char* builtin_llama3_template() {
  // Content may also be a list of {"type": "text", "text": ...} parts (OpenAI form).
  return "{{- bos_token }}"
         "{%- for message in messages %}"
         "{%- if message['content'] is string %}{%- set content = message['content'] %}"
         "{%- else %}{%- set content = message['content'] | selectattr('type', 'equalto', 'text')"
         " | map(attribute='text') | join('') %}{%- endif %}"
         "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>' }}"
         "{%- endfor %}"
         "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}";
}

}  // namespace lancet
