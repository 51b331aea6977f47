// The Llama 3 chat template from the real tokenizer_config.json, rendered for every
// conversation of the HF fixture (written by transformers' apply_chat_template), with and
// without the generation prompt; the built-in Llama 3 fallback template must agree.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "test_paths.h"
#include "tokenizer/chat_template/chat_template.h"

namespace lancet {
namespace {

using Json = nlohmann::ordered_json;

Json load_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return f.good() ? Json::parse(f) : Json();
}

// bos_token is either a string or an AddedToken object {"content": ...}.
std::string token_text(const Json& t) { return t.is_string() ? t.get<std::string>() : t.value("content", ""); }

struct Llama3Fixture {
  Json config = load_json(testing::shared_dir() + "/models/llama3-tokenizer/tokenizer_config.json");
  Json golden = load_json(testing::fixture_dir("tokenizer-golden-llama3.json"));
};

TEST(ChatTemplateGolden, Llama3TemplateMatchesTransformersForEveryConversation) {
  Llama3Fixture fx;
  ASSERT_TRUE(fx.config.contains("chat_template"));
  auto tmpl = ChatTemplate::compile(fx.config["chat_template"].get<std::string>());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  const Json& rows = fx.golden["chat"];
  ASSERT_EQ(rows.size(), 8u);
  int with_prompt = 0, without_prompt = 0;
  for (const Json& row : rows) {
    ChatTemplateOptions opt;
    opt.add_generation_prompt = row["add_generation_prompt"].get<bool>();
    opt.bos_token = token_text(fx.config["bos_token"]);
    opt.eos_token = token_text(fx.config["eos_token"]);
    (opt.add_generation_prompt ? with_prompt : without_prompt)++;
    auto text = apply_chat_template(*tmpl, row["messages"], opt);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    EXPECT_EQ(*text, row["text"].get<std::string>()) << row["messages"].dump();
  }
  EXPECT_EQ(with_prompt, 4);
  EXPECT_EQ(without_prompt, 4);
}

TEST(ChatTemplateGolden, BuiltinLlama3TemplateMatchesTransformers) {
  Llama3Fixture fx;
  auto tmpl = ChatTemplate::compile(builtin_llama3_template());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  for (const Json& row : fx.golden["chat"]) {
    ChatTemplateOptions opt;
    opt.add_generation_prompt = row["add_generation_prompt"].get<bool>();
    opt.bos_token = token_text(fx.config["bos_token"]);
    auto text = apply_chat_template(*tmpl, row["messages"], opt);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    EXPECT_EQ(*text, row["text"].get<std::string>());
  }
  // OpenAI-style content parts render like the same text as a plain string.
  ChatTemplateOptions opt;
  opt.bos_token = "<|begin_of_text|>";
  Json parts = Json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "image_url"}, {"type": "text", "text": "there"}]}])");
  auto text = apply_chat_template(*tmpl, parts, opt);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

}  // namespace
}  // namespace lancet
