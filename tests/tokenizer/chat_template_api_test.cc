// ChatTemplate API behaviour: undefined semantics, key order, variables passed by
// apply_chat_template, continue_final_message, compile-once/render-many from several threads.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tokenizer/chat_template/chat_template.h"

namespace lancet {
namespace {

std::string render(const std::string& src, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  auto t = ChatTemplate::compile(src);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return "<compile error>";
  auto r = t->render(ctx);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : "<render error>";
}

TEST(ChatTemplateApi, UndefinedIsLenient) {
  // Attribute of undefined is undefined (renders empty, is not defined), as the spec asks.
  EXPECT_EQ(render("[{{ foo }}][{{ foo.bar }}][{{ foo.bar is defined }}][{{ foo['x'].y|length }}]"),
            "[][][False][0]");
  EXPECT_EQ(render("{% for x in nothing %}x{% else %}empty{% endfor %}"), "empty");
}

TEST(ChatTemplateApi, TojsonKeepsOrderedJsonKeyOrder) {
  auto ordered = nlohmann::ordered_json::parse(R"({"v": {"zeta": 1, "alpha": [1.0, "é"]}})");
  EXPECT_EQ(render("{{ v|tojson }}", ordered), "{\"zeta\": 1, \"alpha\": [1.0, \"é\"]}");
  // nlohmann::json sorts keys on parse; the template sees them in that order.
  auto t = ChatTemplate::compile("{{ v|tojson }}");
  ASSERT_TRUE(t.ok());
  auto sorted = t->render(nlohmann::json::parse(R"({"v": {"zeta": 1, "alpha": 2}})"));
  ASSERT_TRUE(sorted.ok());
  EXPECT_EQ(*sorted, "{\"alpha\": 2, \"zeta\": 1}");
}

TEST(ChatTemplateApi, ApplyChatTemplatePassesTransformersVariables) {
  auto t = ChatTemplate::compile(
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools is none }}|{{ documents is none }}|"
      "{{ messages|length }}|{{ date_string }}|{{ tools|tojson if tools else '' }}");
  ASSERT_TRUE(t.ok());
  ChatTemplateOptions o;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.add_generation_prompt = false;
  o.extra_context = {{"date_string", "1 Jan"}};
  auto r = apply_chat_template(*t, nlohmann::json::array({{{"role", "user"}, {"content", "x"}}}), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "<s>|</s>|False|True|True|1|1 Jan|");
  o.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  r = apply_chat_template(*t, nlohmann::json::array(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "<s>|</s>|False|False|True|0|1 Jan|[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
  EXPECT_FALSE(apply_chat_template(*t, nlohmann::json::object(), o).ok());  // messages must be a list
}

// transformers' continue_final_message: the rendering ends right after the final message's text
// (its last text part for a list), with its leading spacing dropped where the template kept the
// message verbatim and trimmed where the template trimmed it.
TEST(ChatTemplateApi, ContinueFinalMessageLeavesTheLastMessageOpen) {
  auto llama = ChatTemplate::compile(builtin_llama3_template());
  ASSERT_TRUE(llama.ok());
  ChatTemplateOptions o;
  o.add_generation_prompt = false;
  o.continue_final_message = true;
  o.bos_token = "<|begin_of_text|>";
  const std::string head =
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nCount to ten.<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  auto msgs = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "Count to ten."}, {"role": "assistant", "content": "One, two,"}])");
  auto r = apply_chat_template(*llama, msgs, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, head + "One, two,");
  // The template trims the content: trailing spacing is not restored.
  msgs[1]["content"] = "One, two, ";
  r = apply_chat_template(*llama, msgs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, head + "One, two,");
  // A list of parts: the last text part is what is continued.
  msgs[1]["content"] = nlohmann::ordered_json::parse(R"([{"type": "text", "text": "One,"}, {"type": "text", "text": " two,"}])");
  r = apply_chat_template(*llama, msgs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, head + "One, two,");
  // A template that keeps content verbatim keeps its trailing spacing.
  auto plain = ChatTemplate::compile("{% for m in messages %}<{{ m.role }}>{{ m.content }}</>{% endfor %}");
  ASSERT_TRUE(plain.ok());
  msgs[1]["content"] = "  One, two, ";
  r = apply_chat_template(*plain, msgs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "<user>Count to ten.</><assistant>  One, two, ");
  // Refusals: with add_generation_prompt, no text to continue, text the template does not print.
  ChatTemplateOptions both = o;
  both.add_generation_prompt = true;
  EXPECT_FALSE(apply_chat_template(*llama, msgs, both).ok());
  msgs[1]["content"] = "";
  EXPECT_FALSE(apply_chat_template(*llama, msgs, o).ok());
  msgs[1]["content"] = nlohmann::ordered_json::parse(R"([{"type": "image_url", "image_url": {"url": "x"}}])");
  EXPECT_FALSE(apply_chat_template(*llama, msgs, o).ok());
  auto silent = ChatTemplate::compile("{% for m in messages %}[{{ m.role }}]{% endfor %}");
  ASSERT_TRUE(silent.ok());
  msgs[1]["content"] = "One, two,";
  EXPECT_FALSE(apply_chat_template(*silent, msgs, o).ok());
  // Off: the template's own ending.
  o.continue_final_message = false;
  r = apply_chat_template(*llama, msgs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, head + "One, two,<|eot_id|>");
}

TEST(ChatTemplateApi, StrftimeNowFormatsTheCurrentDate) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char year[8];
  std::strftime(year, sizeof(year), "%Y", &tm);
  EXPECT_EQ(render("{{ strftime_now('%Y') }}"), year);
}

TEST(ChatTemplateApi, RendersConcurrentlyFromOneCompiledTemplate) {
  auto t = ChatTemplate::compile(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content|length %}"
      "{{ m.role }}:{{ m.content }};{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      nlohmann::json msgs = nlohmann::json::array();
      for (int k = 0; k <= i; ++k) msgs.push_back({{"role", "user"}, {"content", std::string(k + 1, 'a')}});
      for (int rep = 0; rep < 200; ++rep) {
        auto r = t->render(nlohmann::json{{"messages", msgs}});
        results[i] = r.ok() ? *r : r.status().to_string();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 8; ++i) {
    std::string want;
    int total = 0;
    for (int k = 0; k <= i; ++k) {
      want += "user:" + std::string(k + 1, 'a') + ";";
      total += k + 1;
    }
    EXPECT_EQ(results[i], want + std::to_string(total));
  }
}

TEST(ChatTemplateApi, ContextMustBeAnObject) {
  auto t = ChatTemplate::compile("x");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(nlohmann::json::array()).ok());
  EXPECT_EQ(t->source(), "x");
}

}  // namespace
}  // namespace lancet
