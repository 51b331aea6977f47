// `lancet tokenize`, `detokenize` and `chat-template`: the tokenizer and chat templates from the
// command line. Input comes on stdin (text, a JSON id list, a JSON messages list).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/model_tokenizer.h"

namespace lancet::cli {
namespace {

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

int fail(const char* cmd, const Status& s) {
  std::fprintf(stderr, "lancet %s: %s\n", cmd, s.to_string().c_str());
  return 1;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Encode text from stdin into token ids", "lancet tokenize"};
  std::string model;
  bool special = false, json = false, bos = false;
  app.add_option("--model", model, "tokenizer.json, HF directory or .gguf")->required();
  app.add_flag("--special", special, "parse special-token strings (e.g. <|eot_id|>) in the text");
  app.add_flag("--add-bos", bos, "put the BOS token first");
  app.add_flag("--json", json, "print a JSON list");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  auto b = load_tokenizer_bundle(model);
  if (!b.ok()) return fail("tokenize", b.status());
  std::string text = read_stdin();
  std::vector<int32_t> ids = b->tokenizer->encode(text, EncodeOptions{.parse_special = special, .add_bos = bos});
  if (json) {
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n");
  }
  return 0;
}

int cmd_detokenize(int argc, char** argv) {
  CLI::App app{"Decode a JSON list of token ids from stdin into text", "lancet detokenize"};
  std::string model;
  bool skip = false;
  app.add_option("--model", model, "tokenizer.json, HF directory or .gguf")->required();
  app.add_flag("--skip-special", skip, "drop special tokens from the text");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  auto b = load_tokenizer_bundle(model);
  if (!b.ok()) return fail("detokenize", b.status());
  auto j = nlohmann::json::parse(read_stdin(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return fail("detokenize", InvalidArgument("stdin must hold a JSON list of token ids"));
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= b->tokenizer->vocab_size())
      return fail("detokenize", InvalidArgument("not a token id of this vocabulary: " + v.dump()));
    ids.push_back(v.get<int32_t>());
  }
  std::string text = b->tokenizer->decode(ids, DecodeOptions{.skip_special = skip});
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

int cmd_chat_template(int argc, char** argv) {
  CLI::App app{"Render a JSON messages list from stdin with the model's chat template", "lancet chat-template"};
  std::string model, tools_file;
  bool gen = false, cont = false, ids = false, hf = false;
  app.add_option("--model", model, "tokenizer.json (tokenizer_config.json beside it), HF directory or .gguf")->required();
  app.add_flag("--add-generation-prompt", gen, "end with the assistant header");
  app.add_flag("--continue-final-message", cont,
               "end right after the final message's text, left open for the model to continue (transformers' "
               "continue_final_message; not with --add-generation-prompt)");
  app.add_option("--tools", tools_file, "JSON file with a list of tool (function) specs");
  app.add_flag("--ids", ids, "print the token ids of the prompt (JSON) instead of the text");
  app.add_flag("--special-tokens-in-content", hf,
               "with --ids: parse special-token strings inside message content too (HF behaviour)");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  auto b = load_tokenizer_bundle(model);
  if (!b.ok()) return fail("chat-template", b.status());
  std::string source = b->chat_template.empty() ? builtin_llama3_template() : b->chat_template;
  auto tmpl = ChatTemplate::compile(source);
  if (!tmpl.ok()) return fail("chat-template", tmpl.status());
  auto messages = nlohmann::ordered_json::parse(read_stdin(), nullptr, false);
  if (!messages.is_array()) return fail("chat-template", InvalidArgument("stdin must hold a JSON list of messages"));
  ChatTemplateOptions opt;
  opt.add_generation_prompt = gen;
  opt.continue_final_message = cont;
  opt.bos_token = b->bos_token;
  opt.eos_token = b->eos_token;
  if (!tools_file.empty()) {
    std::ifstream f(tools_file);
    opt.tools = nlohmann::ordered_json::parse(f, nullptr, false);
    if (opt.tools.is_discarded()) return fail("chat-template", InvalidArgument(tools_file + " is not JSON"));
  }
  auto text = apply_chat_template(*tmpl, messages, opt);
  if (!text.ok()) return fail("chat-template", text.status());
  if (ids) {
    std::vector<std::string> contents;
    for (const auto& m : messages)
      if (m.is_object() && m.contains("content") && m["content"].is_string())
        contents.push_back(m["content"].get<std::string>());
    std::printf("%s\n", nlohmann::json(encode_chat_prompt(*b->tokenizer, *text, contents, ChatEncodeOptions{.hf_identical = hf})).dump().c_str());
  } else {
    std::fwrite(text->data(), 1, text->size(), stdout);
  }
  return 0;
}

}  // namespace lancet::cli
