// Tool calling, request side: tools / tool_choice / parallel_tool_calls validation (each bad
// request a 400 naming the field), the normalized tool turns of the messages, the schema that
// enforces a required or named call (compiled by the structured-outputs compiler), and the
// prompt: Llama 3.1's own template renders tools and calls, ChatML gets the fallback.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/openai_json.h"
#include "server/tool_prompt.h"
#include "structured/json_schema_compiler.h"
#include "test_paths.h"
#include "tokenizer/chat_template/chat_template.h"

namespace lancet::server {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kTools = R"("tools": [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"]}}},
    {"type": "function", "function": {"name": "get-time"}}])";

std::string body(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "x"}], )" + extra + "}";
}

TEST(ToolCalls, ToolsAndChoiceParse) {
  ApiRequest r;
  auto err = parse_chat_request(body(kTools + R"(, "tool_choice": {"type": "function", "function": {"name":
      "get-time"}}, "parallel_tool_calls": false)"), RequestLimits{}, &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  ASSERT_EQ(r.tools.tools.size(), 2u);
  EXPECT_EQ(r.tools.names(), (std::vector<std::string>{"get_weather", "get-time"}));
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tools.named, "get-time");
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_TRUE(r.tools.enforced());
  EXPECT_EQ(r.tools.tools[1].parameters, ojson({{"type", "object"}}));
  // The schema keeps the order it was written in (city before days).
  EXPECT_EQ(r.tools.tools[0].parameters["properties"].begin().key(), "city");
  EXPECT_EQ(r.tools.tools_json[0]["function"]["name"], "get_weather");

  ApiRequest a;
  ASSERT_FALSE(parse_chat_request(body(kTools), RequestLimits{}, &a).has_value());
  EXPECT_EQ(a.tools.choice, ToolChoice::kAuto);  // the default with tools
  EXPECT_TRUE(a.tools.active());
  EXPECT_FALSE(a.tools.enforced());
  ApiRequest n;
  ASSERT_FALSE(parse_chat_request(body(kTools + R"(, "tool_choice": "none")"), RequestLimits{}, &n).has_value());
  EXPECT_TRUE(n.tools.given());
  EXPECT_FALSE(n.tools.active());
}

TEST(ToolCalls, BadToolRequestsAre400sNamingTheField) {
  const std::pair<std::string, const char*> cases[] = {
      {R"("tools": {"type": "function"})", "tools"},
      {R"("tools": [{"type": "code", "function": {"name": "f"}}])", "tools"},
      {R"("tools": [{"type": "function"}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": ""}}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "bad name"}}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f.g"}}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])",
       "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "description": 3}}])", "tools"},
      {R"("tool_choice": "auto")", "tool_choice"},
      {R"("tool_choice": "required", "tools": [])", "tool_choice"},
      {R"("tool_choice": {"type": "function", "function": {"name": "f"}})", "tool_choice"},
      {kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "send_mail"}})", "tool_choice"},
      {kTools + R"(, "tool_choice": "always")", "tool_choice"},
      {kTools + R"(, "tool_choice": 1)", "tool_choice"},
      {kTools + R"(, "tool_choice": {"type": "function"})", "tool_choice"},
      {kTools + R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls"},
      {kTools + R"(, "tool_choice": "required", "response_format": {"type": "json_object"})", "tool_choice"},
  };
  for (const auto& [extra, param] : cases) {
    ApiRequest r;
    auto err = parse_chat_request(body(extra), RequestLimits{}, &r);
    ASSERT_TRUE(err.has_value()) << extra;
    EXPECT_EQ(err->status, 400) << extra;
    EXPECT_EQ(err->param, param) << extra << ": " << err->message;
  }
  ApiRequest c;
  auto err = parse_completion_request(R"({"prompt": "x", )" + kTools + "}", RequestLimits{}, &c);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->param, "tools");
}

TEST(ToolCalls, ToolTurnsAreNormalized) {
  ApiRequest r;
  auto err = parse_chat_request(R"({"messages": [{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], )" + kTools + "}",
                                RequestLimits{}, &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  ASSERT_EQ(r.messages.size(), 3u);
  const ojson& call = r.messages[1]["tool_calls"][0];
  EXPECT_EQ(call["id"], "call_1");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], ojson({{"city", "Paris"}, {"days", 1}}));
  EXPECT_EQ(r.messages[1]["content"], "");
  EXPECT_EQ(r.messages[2]["role"], "tool");
  EXPECT_EQ(r.messages[2]["tool_call_id"], "call_1");
  EXPECT_EQ(r.messages[2]["content"], "sunny");
  EXPECT_TRUE(has_tool_turns(r.messages));

  const char* bad[] = {
      R"({"messages": [{"role": "tool", "content": "x"}]})",  // no tool_call_id
      R"({"messages": [{"role": "assistant", "tool_calls": []}]})",
      R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}]})",
      R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]})",
      R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})",
      R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]})",
  };
  for (const char* b : bad) {
    ApiRequest x;
    auto e = parse_chat_request(b, RequestLimits{}, &x);
    ASSERT_TRUE(e.has_value()) << b;
    EXPECT_EQ(e->param, "messages") << b;
  }
}

TEST(ToolCalls, EnforcingSchemas) {
  ApiRequest r;
  ASSERT_FALSE(parse_chat_request(body(kTools + R"(, "tool_choice": {"type": "function", "function":
      {"name": "get_weather"}})"), RequestLimits{}, &r).has_value());
  const ojson named = tool_call_schema(r.tools);
  EXPECT_EQ(named["properties"]["name"], ojson({{"const", "get_weather"}}));
  EXPECT_EQ(named["properties"]["parameters"], r.tools.tools[0].parameters);
  EXPECT_EQ(named["required"], ojson({"name", "parameters"}));
  EXPECT_EQ(named["additionalProperties"], false);
  EXPECT_EQ(named["properties"].begin().key(), "name");  // the name is generated first
  EXPECT_TRUE(structured::compile_json_schema(named).ok());

  r.tools.choice = ToolChoice::kRequired;
  const ojson any = tool_call_schema(r.tools);
  ASSERT_EQ(any["anyOf"].size(), 2u);
  EXPECT_EQ(any["anyOf"][1]["properties"]["name"]["const"], "get-time");
  EXPECT_EQ(any["anyOf"][1]["properties"]["parameters"], ojson({{"type", "object"}}));
  EXPECT_TRUE(structured::compile_json_schema(any).ok());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ApiRequest round_trip_request() {
  ApiRequest r;
  auto err = parse_chat_request(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], )" + kTools + "}",
                                RequestLimits{}, &r);
  EXPECT_FALSE(err.has_value());
  return r;
}

TEST(ToolPrompt, Llama31TemplateRendersToolsAndCalls) {
  const std::string src = read_file(lancet::testing::source_dir() + "/tests/tokenizer/data/llama31_instruct_template.jinja");
  ASSERT_FALSE(src.empty());
  EXPECT_TRUE(template_handles_tools(src));
  auto tmpl = ChatTemplate::compile(src);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
  const ApiRequest r = round_trip_request();
  ChatTemplateOptions opt;
  opt.tools = r.tools.tools_json;
  opt.bos_token = "<|begin_of_text|>";
  auto text = apply_chat_template(*tmpl, r.messages, opt);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_NE(text->find(R"("name": "get_weather")"), std::string::npos) << *text;  // the tool list
  EXPECT_NE(text->find(R"({"name": "get_weather", "parameters": {"city": "Paris"}})"), std::string::npos) << *text;
  EXPECT_NE(text->find("<|start_header_id|>ipython<|end_header_id|>"), std::string::npos) << *text;
}

TEST(ToolPrompt, FallbackForTemplatesWithoutTools) {
  const std::string chatml =
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}";
  EXPECT_FALSE(template_handles_tools(chatml));
  const ApiRequest r = round_trip_request();
  const ojson msgs = fallback_tool_messages(r.messages, r.tools.tools_json);
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[0]["role"], "system");
  const std::string sys = msgs[0]["content"].get<std::string>();
  EXPECT_EQ(sys.rfind("Be brief.\n\nYou have access to the following functions.", 0), 0u) << sys;
  EXPECT_NE(sys.find(R"({"name":"get-time"})"), std::string::npos) << sys;
  EXPECT_EQ(msgs[2]["content"], R"({"name":"get_weather","parameters":{"city":"Paris"}})");
  EXPECT_FALSE(msgs[2].contains("tool_calls"));
  EXPECT_EQ(msgs[3], ojson({{"role", "tool"}, {"content", "sunny"}}));
  auto tmpl = ChatTemplate::compile(chatml);
  ASSERT_TRUE(tmpl.ok());
  auto text = apply_chat_template(*tmpl, msgs, ChatTemplateOptions{});
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("<|im_start|>tool\nsunny<|im_end|>"), std::string::npos) << *text;

  // Without a system message the tools get one of their own, first.
  ojson plain = ojson::array({{{"role", "user"}, {"content", "hi"}}});
  const ojson with = fallback_tool_messages(plain, r.tools.tools_json);
  ASSERT_EQ(with.size(), 2u);
  EXPECT_EQ(with[0]["role"], "system");
  EXPECT_EQ(with[1], plain[0]);
}

}  // namespace
}  // namespace lancet::server
