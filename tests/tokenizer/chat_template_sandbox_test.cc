// Hostile and broken templates: each must fail fast (well under a second) with a clear,
// positioned error instead of hanging, exhausting memory or reaching host objects.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tokenizer/chat_template/chat_template.h"

namespace lancet {
namespace {

// Sanitizer builds run the interpreter several times slower; the limit scales with them.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kFast = 10.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kFast = 10.0;
#else
constexpr double kFast = 1.0;
#endif
#else
constexpr double kFast = 1.0;
#endif

struct Outcome {
  Status status;
  double seconds;
};

Outcome run(const std::string& source, const nlohmann::json& ctx = nlohmann::json::object()) {
  auto t0 = std::chrono::steady_clock::now();
  Status st;
  auto tmpl = ChatTemplate::compile(source);
  if (!tmpl.ok()) {
    st = tmpl.status();
  } else {
    auto r = tmpl->render(ctx);
    st = r.ok() ? OkStatus() : r.status();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {st, s};
}

void expect_fails_fast(const std::string& source, StatusCode code, const std::string& needle,
                       const nlohmann::json& ctx = nlohmann::json::object()) {
  Outcome o = run(source, ctx);
  ASSERT_FALSE(o.status.ok()) << source;
  EXPECT_EQ(o.status.code(), code) << o.status.to_string();
  EXPECT_NE(o.status.message().find(needle), std::string::npos) << o.status.to_string();
  EXPECT_LT(o.seconds, kFast) << source;
}

TEST(ChatTemplateSandbox, InfiniteMacroRecursionHitsDepthCap) {
  expect_fails_fast("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", StatusCode::kResourceExhausted,
                    "too deep");
  // Mutual recursion through caller() too.
  expect_fails_fast("{% macro g() %}{% call g() %}x{% endcall %}{% endmacro %}{{ g() }}",
                    StatusCode::kResourceExhausted, "too deep");
}

TEST(ChatTemplateSandbox, HugeRangeIsRefused) {
  expect_fails_fast("{% for i in range(10**9) %}x{% endfor %}", StatusCode::kResourceExhausted, "range too big");
  expect_fails_fast("{{ range(-9223372036854775807, 9223372036854775807)|length }}", StatusCode::kResourceExhausted,
                    "range too big");
}

TEST(ChatTemplateSandbox, StringDoublingHitsSizeCap) {
  expect_fails_fast(
      "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
      StatusCode::kResourceExhausted, "exceeds");
  expect_fails_fast("{{ 'a' * 1000000000 }}", StatusCode::kResourceExhausted, "exceeds");
  expect_fails_fast("{{ [1, 2] * 1000000000 }}", StatusCode::kResourceExhausted, "exceeds");
  expect_fails_fast("{% for i in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}",
                    StatusCode::kResourceExhausted, "exceeds");
}

TEST(ChatTemplateSandbox, NestedLoopsExhaustOperationBudget) {
  expect_fails_fast("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                    StatusCode::kResourceExhausted, "operation budget");
  // A small configured budget is honoured.
  TemplateLimits small;
  small.max_operations = 1000;
  auto t = ChatTemplate::compile("{% for i in range(2000) %}{{ i }}{% endfor %}", small);
  ASSERT_TRUE(t.ok());
  auto r = t->render(nlohmann::json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST(ChatTemplateSandbox, PythonInternalsAreUnreachable) {
  nlohmann::json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  expect_fails_fast("{{ ''.__class__ }}", StatusCode::kInvalidArgument, "access to attribute __class__ is not allowed");
  expect_fails_fast("{{ messages.__class__.__mro__ }}", StatusCode::kInvalidArgument,
                    "access to attribute __class__ is not allowed", ctx);
  expect_fails_fast("{{ cycler.__init__.__globals__ }}", StatusCode::kInvalidArgument,
                    "access to attribute __init__ is not allowed");
  expect_fails_fast("{{ messages[0]['__class__'] }}", StatusCode::kInvalidArgument, "not allowed", ctx);
  expect_fails_fast("{{ range.__self__ }}", StatusCode::kInvalidArgument, "not allowed");
  expect_fails_fast("{{ namespace()|attr('__class__') }}", StatusCode::kInvalidArgument, "not allowed");
  expect_fails_fast("{% set ns = namespace() %}{% set ns.__dict__ = 1 %}", StatusCode::kInvalidArgument, "not allowed");
  // Values are immutable, as in transformers' ImmutableSandboxedEnvironment.
  expect_fails_fast("{{ messages.append(1) }}", StatusCode::kInvalidArgument, "immutable", ctx);
  expect_fails_fast("{{ messages[0].update({'role': 'x'}) }}", StatusCode::kInvalidArgument, "immutable", ctx);
  // A dict key that merely starts with an underscore is data, not an attribute.
  Outcome o = run("{{ d._private }}", {{"d", {{"_private", "ok"}}}});
  EXPECT_TRUE(o.status.ok()) << o.status.to_string();
}

TEST(ChatTemplateSandbox, SelfReferenceAndDeepValuesDoNotCrash) {
  expect_fails_fast("{% set ns = namespace(a=1) %}{% set ns.a = [ns] %}{{ ns }}", StatusCode::kResourceExhausted,
                    "nests");
  expect_fails_fast(
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}",
      StatusCode::kResourceExhausted, "nests");
  nlohmann::json deep = nlohmann::json::array();
  for (int i = 0; i < 1000; ++i) deep = nlohmann::json::array({deep});
  expect_fails_fast("{{ x }}", StatusCode::kInvalidArgument, "nests too deeply", {{"x", deep}});
}

TEST(ChatTemplateSandbox, DeepSyntaxNestingIsASyntaxError) {
  std::string src = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  expect_fails_fast(src, StatusCode::kResourceExhausted, "nests too deeply");
  std::string blocks;
  for (int i = 0; i < 3000; ++i) blocks += "{% if true %}";
  expect_fails_fast(blocks, StatusCode::kResourceExhausted, "nests too deeply");
}

TEST(ChatTemplateSandbox, UnknownFilterAndTestFailAtCompileWithPosition) {
  expect_fails_fast("line one\n{{ messages | nosuchfilter }}", StatusCode::kInvalidArgument,
                    "line 2, column 15: no filter named 'nosuchfilter'");
  expect_fails_fast("{% if x is frobnicated %}{% endif %}", StatusCode::kInvalidArgument, "no test named 'frobnicated'");
}

TEST(ChatTemplateSandbox, SyntaxErrorsCarryLineNumbers) {
  expect_fails_fast("a\nb\n{% if %}x{% endif %}", StatusCode::kInvalidArgument, "line 3, column 7: expected an expression");
  expect_fails_fast("{% for m in messages %}\n{{ m }}\n", StatusCode::kInvalidArgument,
                    "line 2, column 8: unexpected end of template, expected 'else' or 'endfor'");
  expect_fails_fast("\n\n\n  {{ 1 + }}", StatusCode::kInvalidArgument, "line 4, column 10: expected an expression");
  expect_fails_fast("{{ 'abc }}", StatusCode::kInvalidArgument, "line 1, column 4: unterminated string literal");
  expect_fails_fast("x\n{% endfor %}", StatusCode::kInvalidArgument, "line 2");
  expect_fails_fast("{% include 'other.html' %}", StatusCode::kInvalidArgument, "unknown or unsupported tag 'include'");
  expect_fails_fast("{{ x }", StatusCode::kInvalidArgument, "unexpected '}'");
  expect_fails_fast("{# never closed", StatusCode::kInvalidArgument, "unterminated comment");
}

TEST(ChatTemplateSandbox, RuntimeErrorsCarryLineNumbers) {
  expect_fails_fast("ok\n{{ raise_exception('Conversation roles must alternate') }}", StatusCode::kInvalidArgument,
                    "line 2, column 4: raise_exception: Conversation roles must alternate");
  expect_fails_fast("\n{{ 1 + 'a' }}", StatusCode::kInvalidArgument,
                    "line 2, column 6: unsupported operand type(s) for +: 'int' and 'str'");
  expect_fails_fast("{{ missing + 1 }}", StatusCode::kInvalidArgument, "'missing' is undefined");
  expect_fails_fast("{{ missing() }}", StatusCode::kInvalidArgument, "'missing' is undefined and cannot be called");
}

}  // namespace
}  // namespace lancet
