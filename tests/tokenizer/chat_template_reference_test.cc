// Chat templates rendered by lancet's interpreter against the PyPI jinja2 package configured
// as transformers configures it (tests/tokenizer/chat_template_reference.py): the official
// Llama 3.1 Instruct template with tools, SmolLM2's template read from its GGUF with the PyPI
// gguf package, and a battery of Jinja snippets covering the supported language.
//
// tests/tokenizer/data/llama31_instruct_template.jinja is the "chat_template" field of Meta's
// Llama-3.1-8B-Instruct tokenizer_config.json (huggingface.co/meta-llama/Llama-3.1-8B-Instruct),
// stored verbatim.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_paths.h"
#include "tokenizer/chat_template/chat_template.h"

namespace lancet {
namespace {

using Json = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A Python that can import jinja2 and gguf; "" when none can.
std::string reference_python() {
  static const std::string py = [] {
    for (const std::string& cand : {testing::python(), std::string("python3")}) {
      std::string out;
      if (testing::run_command(cand + " -c 'import jinja2, gguf'", &out) == 0) return cand;
    }
    return std::string();
  }();
  return py;
}

// Runs the reference renderer on `spec` ({"gguf": {...}, "jobs": [...]}).
Json run_reference(const Json& spec) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lancet-chat-template-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string in = (dir / "jobs.json").string(), out = (dir / "out.json").string();
  std::ofstream(in) << spec.dump();
  std::string log;
  const std::string cmd = reference_python() + " " + testing::source_dir() +
                          "/tests/tokenizer/chat_template_reference.py " + in + " " + out;
  int rc = testing::run_command(cmd, &log);
  EXPECT_EQ(rc, 0) << log;
  Json result = rc == 0 ? Json::parse(read_file(out)) : Json::object();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return result;
}

// The variables transformers' apply_chat_template passes to the template.
Json hf_context(const Json& messages, const ChatTemplateOptions& o) {
  Json ctx = Json::object();
  ctx["messages"] = messages;
  ctx["tools"] = o.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = o.add_generation_prompt;
  ctx["bos_token"] = o.bos_token;
  ctx["eos_token"] = o.eos_token;
  for (auto it = o.extra_context.begin(); it != o.extra_context.end(); ++it) ctx[it.key()] = it.value();
  return ctx;
}

struct Case {
  std::string name;
  Json messages;
  ChatTemplateOptions options;
};

// Renders every case with lancet and with jinja2 and compares the text exactly.
void expect_same_as_jinja2(const std::string& template_source, const std::vector<Case>& cases) {
  Json spec = {{"jobs", Json::array()}};
  for (const Case& c : cases) spec["jobs"].push_back({{"template", template_source}, {"context", hf_context(c.messages, c.options)}});
  Json ref = run_reference(spec);
  ASSERT_EQ(ref["results"].size(), cases.size());
  auto tmpl = ChatTemplate::compile(template_source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& r = ref["results"][i];
    auto got = apply_chat_template(*tmpl, cases[i].messages, cases[i].options);
    if (r["ok"].get<bool>()) {
      ASSERT_TRUE(got.ok()) << cases[i].name << ": " << got.status().to_string();
      EXPECT_EQ(*got, r["text"].get<std::string>()) << cases[i].name;
    } else {
      EXPECT_FALSE(got.ok()) << cases[i].name << ": jinja2 failed with " << r["error"] << " but lancet rendered "
                             << *got;
    }
  }
}

Json weather_tools() {
  return Json::parse(R"([{"type": "function", "function": {
      "name": "get_current_weather",
      "description": "Get the current weather in a given location",
      "parameters": {"type": "object",
                     "properties": {"location": {"type": "string", "description": "The city and country, e.g. Paris, France"},
                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                     "required": ["location"]}}}])");
}

Json tool_conversation() {
  return Json::parse(R"([
    {"role": "system", "content": "  You are a helpful assistant with tool access.\n"},
    {"role": "user", "content": "What is the weather in Paris today?"},
    {"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "get_current_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}}]},
    {"role": "tool", "content": "{\"temperature\": 18, \"condition\": \"cloudy\"}"},
    {"role": "assistant", "content": "It is 18 °C and cloudy in Paris."},
    {"role": "user", "content": "Thanks! And in Zürich?"}])");
}

class ChatTemplateReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (reference_python().empty()) FAIL() << "no python with jinja2 + gguf (pip install jinja2 gguf)";
  }
};

TEST_F(ChatTemplateReference, Llama31InstructWithToolsMatchesJinja2) {
  const std::string source = read_file(testing::source_dir() + "/tests/tokenizer/data/llama31_instruct_template.jinja");
  ASSERT_GT(source.size(), 4000u);
  std::vector<Case> cases;
  ChatTemplateOptions base;
  base.bos_token = "<|begin_of_text|>";
  base.eos_token = "<|eot_id|>";

  Case c{"tools in first user message", tool_conversation(), base};
  c.options.tools = weather_tools();
  c.options.extra_context = {{"date_string", "29 Nov 2025"}};
  cases.push_back(c);

  c.name = "tools in system message";
  c.options.extra_context["tools_in_user_message"] = false;
  cases.push_back(c);

  c.name = "no generation prompt";
  c.options.add_generation_prompt = false;
  cases.push_back(c);

  Case plain{"no tools, default date", Json::parse(R"([{"role": "user", "content": " Hi! "}])"), base};
  cases.push_back(plain);

  Case builtin{"builtin tool call (python_tag, eom)", Json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Search the news."},
      {"role": "assistant", "tool_calls": [{"function": {"name": "brave_search", "arguments": {"query": "news today"}}}]},
      {"role": "ipython", "content": {"results": [{"title": "A", "score": 0.5}], "ok": true}}])"), base};
  builtin.options.extra_context = {{"builtin_tools", {"brave_search", "wolfram_alpha", "code_interpreter"}},
                                   {"date_string", "01 Jan 2025"}};
  cases.push_back(builtin);

  Case two_calls{"two tool calls raise", Json::parse(R"([{"role": "user", "content": "x"},
      {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": {}}}, {"function": {"name": "b", "arguments": {}}}]}])"), base};
  cases.push_back(two_calls);

  Case no_user{"tools but no user message raise", Json::parse(R"([{"role": "system", "content": "s"}])"), base};
  no_user.options.tools = weather_tools();
  cases.push_back(no_user);

  expect_same_as_jinja2(source, cases);

  // Independently of jinja2, the prompt has the documented Llama 3.1 layout.
  auto tmpl = ChatTemplate::compile(source);
  ASSERT_TRUE(tmpl.ok());
  auto text = apply_chat_template(*tmpl, cases[1].messages, cases[1].options);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(text->rfind("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
                        "Cutting Knowledge Date: December 2023\nToday Date: 29 Nov 2025\n\n",
                        0),
            0u);
  EXPECT_NE(text->find("{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_current_weather\","),
            std::string::npos);
  EXPECT_NE(text->find("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_current_weather\", "
                       "\"parameters\": {\"location\": \"Paris, France\", \"unit\": \"celsius\"}}<|eot_id|>"),
            std::string::npos);
  EXPECT_NE(text->find("<|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temperature\\\": 18, "
                       "\\\"condition\\\": \\\"cloudy\\\"}\"<|eot_id|>"),
            std::string::npos);
  auto err = apply_chat_template(*tmpl, cases[5].messages, cases[5].options);
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("This model only supports single tool-calls at once!"), std::string::npos);
}

TEST_F(ChatTemplateReference, SmolLM2GgufTemplateMatchesJinja2) {
  const std::string model = testing::default_model();
  if (model.empty()) FAIL() << "SmolLM2 GGUF not present (tools/fetch_model.sh)";
  Json spec = {{"gguf", {{"smollm2", model}}}, {"jobs", Json::array()}};
  const std::vector<Json> conversations = {
      Json::parse(R"([{"role": "user", "content": "What is the capital of France?"}])"),
      Json::parse(R"([{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Arr!"}, {"role": "user", "content": "Tell me more.\n"}])"),
      Json::parse(R"([{"role": "user", "content": "Zähle bis drei: 一, 二, 三"}, {"role": "assistant", "content": " 1 2 3 "}])"),
  };
  std::vector<ChatTemplateOptions> opts;
  for (const Json& conv : conversations) {
    for (bool gen : {true, false}) {
      ChatTemplateOptions o;
      o.add_generation_prompt = gen;
      o.bos_token = "<|im_start|>";
      o.eos_token = "<|im_end|>";
      spec["jobs"].push_back({{"template", "gguf:smollm2"}, {"context", hf_context(conv, o)}});
      opts.push_back(o);
    }
  }
  Json ref = run_reference(spec);
  ASSERT_TRUE(ref.contains("templates"));
  const std::string source = ref["templates"]["smollm2"].get<std::string>();
  ASSERT_NE(source.find("<|im_start|>"), std::string::npos);
  auto tmpl = ChatTemplate::compile(source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  for (size_t i = 0; i < opts.size(); ++i) {
    const Json& r = ref["results"][i];
    ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
    auto got = apply_chat_template(*tmpl, conversations[i / 2], opts[i]);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, r["text"].get<std::string>()) << "case " << i;
  }
  // The default system prompt is inserted when the conversation has none.
  auto first = apply_chat_template(*tmpl, conversations[0], opts[0]);
  EXPECT_EQ(*first,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
}

// Language features one at a time; each snippet renders against the same context.
TEST_F(ChatTemplateReference, JinjaSnippetsMatchJinja2) {
  const Json ctx = Json::parse(R"({
    "messages": [{"role": "system", "content": "  Be brief. "},
                 {"role": "user", "content": "Hi é \"q\""},
                 {"role": "assistant", "content": "Hello", "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": [1, 2.5, null, true]}}}]},
                 {"role": "tool", "content": "42"}],
    "x": 3, "s": "Hello World-foo bar", "l": [3, 1, 2], "d": {"b": 1, "a": 2}, "f": 2.5, "n": null, "t": true,
    "u8": "héllo 世界"})");
  const std::vector<std::string> snippets = {
      "{{ x + 1 }}|{{ x / 2 }}|{{ x // 2 }}|{{ -x % 2 }}|{{ x ** 3 }}|{{ f * 2 }}|{{ 7 / 7 }}|{{ 1e3 }}|{{ 0.1 + 0.2 }}|{{ 1/3 }}",
      "{{ -1 ** 2 }}|{{ 2 ** -1 }}|{{ -7 // 2 }}|{{ 7 % -3 }}|{{ -7.5 % 2 }}|{{ 1e16 }}|{{ 1.5e-5 }}|{{ 123456789.123 }}|{{ 1e15 }}|{{ 100.0 }}",
      "{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s|title }}|{{ s|capitalize }}|{{ s.split() }}|{{ s.split('o') }}|{{ s.split('o', 1) }}|{{ s.rsplit('o', 1) }}",
      "{{ l }}|{{ d }}|{{ n }}|{{ t }}|{{ (1,) }}|{{ (1,2) }}|{{ [] }}|{{ {} }}|{{ 'it\\'s' }}|{{ ['it\\'s', \"a\\nb\"] }}",
      "{{ d|tojson }}|{{ messages|tojson }}|{{ l|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ {}|tojson(indent=2) }}|{{ u8|tojson }}|{{ u8|tojson(ensure_ascii=true) }}",
      "{{ messages|tojson(indent=4) }}|{{ l|tojson(separators=(',', ':')) }}{{ d|tojson(indent=0) }}",
      "{{ n|tojson }}{{ t|tojson }}{{ f|tojson }}{{ 'a\\u0001b\\\\c/\\t'|tojson }}",
      "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}:{{ m.role }};{% endfor %}",
      "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }} {{ m['role'] }}\n{% else %}none{% endfor %}",
      "{% for m in [] %}x{% else %}empty{% endfor %}{% for i in range(3) %}{{ loop.previtem }},{{ loop.nextitem }};{% endfor %}",
      "{% set ns = namespace(c=0, found=false) %}{% for m in messages %}{% set ns.c = ns.c + 1 %}{% if m.role == 'tool' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.c }} {{ ns.found }}",
      "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}{% for k, v in d|items %}{{ k }}={{ v }},{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
      "{{ messages[1:]|length }}|{{ messages[-1].content }}|{{ l[::-1] }}|{{ s[1:4] }}|{{ s[-3:] }}|{{ u8[1:3] }}|{{ u8|length }}|{{ l[5] is defined }}",
      "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}{{ s is string }}{{ d is mapping }}{{ l is iterable }}{{ s is iterable }}{{ x is number }}{{ t is boolean }}{{ l is sequence }}{{ x is integer }}{{ f is float }}{{ x is odd }}{{ x is divisibleby 3 }}",
      "{{ 'a' if x > 2 else 'b' }}{{ 'a' if x > 5 }}|{{ x > 2 and s }}|{{ n or 'def' }}|{{ not x }}|{{ 1 < x < 5 }}|{{ 'ell' in s }}|{{ 3 in l }}|{{ 'a' in d }}|{{ 'z' not in d }}",
      "{{ y|default('dflt') }}|{{ ''|default('e', true) }}|{{ n|default('x') }}|{{ l|join(', ') }}|{{ l|first }}|{{ l|last }}|{{ l|sort }}|{{ l|reverse|list }}|{{ l|sum }}|{{ l|min }}|{{ l|max }}",
      "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}|{{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|join(',') }}|{{ messages|selectattr('tool_calls', 'defined')|list|length }}|{{ messages|map(attribute='role')|list }}",
      "{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ s|replace('o', '0') }}|{{ s.replace('o','0',1) }}|{{ s|length }}|{{ s|wordcount }}|{{ '<a & b>'|e }}|{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}",
      "{{ '12'|int + 1 }}|{{ '1.5'|float }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ x|string ~ 'a' }}|{{ 1|float }}|{{ x ~ n ~ y }}",
      "{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, 2) }}{{ f(b=3, a=4) }}",
      "{% macro m() %}<{{ caller() }}>{% endmacro %}{% call m() %}inner {{ x }}{% endcall %}{% filter upper %}abc {{ s }}{% endfilter %}",
      "a\n  {% if true %}\n  x\n  {% endif %}\nb {# c #}\n  {#- d #}\ne\n{{ x }}\n  {{ x }}\n{%- if true -%}  y  {%- endif -%}\n z\n",
      "  {% for i in [1, 2] %}\n    {{ i }}\n  {% endfor %}\n{%+ if true %}kept{% endif %}\n{% if true +%}\nnl\n{% endif %}",
      "{% if x == 1 %}one{% elif x == 3 %}three{% else %}other{% endif %}",
      "{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}|{{ range(2, 10, 3)|list }}|{{ range(5, 0, -2)|list }}",
      "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c %}block {{ a }}{% endset %}{{ c }}",
      "{{ s.startswith('Hell') }}{{ s.endswith(('x', 'bar')) }}{{ s.strip('Hr') }}{{ '  a b  '.lstrip() }}|{{ s.find('o') }}{{ s.count('o') }}|{{ ','.join(['a','b']) }}",
      "{{ d.get('a') }}{{ d.get('z', 9) }}{{ d.get('z') }}{{ d.keys()|list }}{{ d.values()|list }}",
      "{{ messages[0]['content']|trim }}|{{ messages[2].tool_calls[0].function.arguments|tojson }}",
      "{{ l|map('string')|join('-') }}|{{ ['a','B','a']|unique|list }}|{{ [1,2,3]|select('odd')|list }}|{{ [1,2,3]|reject('odd')|list }}",
      "{{ 'x' * 3 }}{{ [1] * 2 }}{{ 'a' + 'b' }}{{ [1] + [2] }}{{ True + 1 }}|{{ '%s-%d' % ('a', 3) }}|{{ '%05.2f' % 3.14159 }}|{{ 'v=%s' % x }}",
      "{{ 'a' 'b' }}|{{ \"\\u00e9\\t|\\x41\" }}|{{ [1,2,][1] }}|{{ {'a': 1,}['a'] }}",
      "{% for a in [[1,2],[3,4]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}",
      "{{ messages|length }}{{ messages|count }}{{ (messages|first).role }}{{ messages[0].role|upper }}",
      "{{ l|sort(reverse=true) }}|{{ messages|map(attribute='role')|unique|list }}|{{ d|dictsort }}",
      "{{ 'abc'[0] }}{{ 'abc'[-1] }}{{ l.index(1) }}{{ l.count(3) }}{{ s is lower }}{{ 'abc' is lower }}{{ x is eq 3 }}{{ x is gt 2 }}{{ x is in l }}{{ n is sameas none }}",
      "{{ u8.upper() }}|{{ u8.split() }}|{{ u8[::-1] }}|{{ ' \u3000x\u00a0 '.strip() }}|",
      "{% set x = 5 %}{% macro g() %}{{ x }}{% endmacro %}{{ g() }}",
      "{{ 1 == 1.0 }}{{ [1,2] == [1,2] }}{{ d == {'a':2,'b':1} }}{{ 'a' < 'b' }}{{ [1,2] < [1,3] }}{{ none == none }}",
      "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set messages = messages[1:] %}{% endif %}{{ sys }}|{{ messages|length }}",
      "{% set x = 0 %}{% for i in range(3) %}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}",
      "{{ 'Hello'|list }}|{{ d|list }}|{{ d|length }}|{{ ''|first }}|{{ y }}|{{ none }}",
      "{%- for message in messages %}{%- if message.content is string %}{{ message.content }}{% endif %}{% endfor %}",
      "{{ 'a\\r\\nb'|indent(3, first=true, blank=true) }}|{{ ' A-b c(d'|title }}|{{ 'ABC def'.capitalize() }}",
      "{% set w = '  a  b\tc \n d  ' %}{{ w.split() }}{{ w.split(None, 1) }}{{ w.rsplit(None, 2) }}{{ 'a,b,,c'.split(',', 2) }}{{ 'a,b,,c'.rsplit(',', 1) }}{{ w.splitlines() }}",
      "{{ 'abc'.replace('', '-') }}{{ 'aaa'.replace('a', 'b', 2) }}{{ \"they're bill's\".title() }}{{ '%-5s|%5s|%3d|%x' % ('ab', 'cd', 7, 255) }}",
      // Both sides must fail on these.
      "{{ 1 + 'a' }}",
      "{{ raise_exception('boom') }}",
      "{{ n.x.y + 1 }}",
      "{{ [1, 2].append(3) }}",
      "{{ range(100001)|length }}",
      "{% for a, b in [1, 2] %}{% endfor %}",
      "{{ 1 / 0 }}",
  };
  Json spec = {{"jobs", Json::array()}};
  for (const std::string& s : snippets) spec["jobs"].push_back({{"template", s}, {"context", ctx}});
  Json ref = run_reference(spec);
  ASSERT_EQ(ref["results"].size(), snippets.size());
  for (size_t i = 0; i < snippets.size(); ++i) {
    const Json& r = ref["results"][i];
    auto tmpl = ChatTemplate::compile(snippets[i]);
    StatusOr<std::string> got = tmpl.ok() ? tmpl->render(ctx) : StatusOr<std::string>(tmpl.status());
    if (r["ok"].get<bool>()) {
      ASSERT_TRUE(got.ok()) << snippets[i] << "\n" << got.status().to_string();
      EXPECT_EQ(*got, r["text"].get<std::string>()) << snippets[i];
    } else {
      EXPECT_FALSE(got.ok()) << snippets[i] << " rendered " << *got << " but jinja2 failed: " << r["error"];
    }
  }
}

}  // namespace
}  // namespace lancet
