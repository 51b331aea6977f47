// The OpenAI request parser and response builders, in process: field mapping, one test per
// error class, and a randomized test over thousands of mutated requests (byte-level and
// structural mutations) that must each parse or fail with a 400 envelope, never crash, and
// that, when accepted, always give parameters the engine accepts. Also SSE framing, auth and
// the Prometheus exposition.
#include "server/openai_json.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "server/auth.h"
#include "server/metrics.h"
#include "server/sse.h"

namespace lancet::server {
namespace {

using nlohmann::json;

TEST(OpenAiJson, ChatFieldsMapToSamplingParams) {
  const std::string body = R"({"model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
    "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "max_completion_tokens": 33, "n": 2,
    "stop": "END", "seed": 42, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "logit_bias": {"17": -100, "3": 2.5}, "logprobs": true, "top_logprobs": 4, "stream": true,
    "stream_options": {"include_usage": true}, "user": "u1", "some_unknown_field": {"x": 1}})";
  ApiRequest r;
  auto err = parse_chat_request(body, RequestLimits{}, &r);
  ASSERT_FALSE(err) << err->message;
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "hi there");
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.05f);
  EXPECT_EQ(r.params.max_tokens, 33);
  EXPECT_TRUE(r.max_tokens_set);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  EXPECT_EQ(r.params.logit_bias.size(), 2u);
  EXPECT_FLOAT_EQ(r.params.logit_bias.at(17), -100.0f);
  EXPECT_EQ(r.params.logprobs, 4);
  EXPECT_TRUE(r.want_logprobs && r.stream && r.include_usage);
  EXPECT_EQ(r.user, "u1");
}

TEST(OpenAiJson, CompletionPromptForms) {
  ApiRequest r;
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "hello"})", {}, &r));
  EXPECT_EQ(r.text_prompts, std::vector<std::string>{"hello"});
  EXPECT_EQ(r.params.logprobs, -1);
  EXPECT_FALSE(r.max_tokens_set);
  ASSERT_FALSE(parse_completion_request(R"({"prompt": ["a", "b"], "logprobs": 3, "max_tokens": 7})", {}, &r));
  EXPECT_EQ(r.text_prompts.size(), 2u);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_EQ(r.params.max_tokens, 7);
  ASSERT_FALSE(parse_completion_request(R"({"prompt": [1, 2, 3]})", {}, &r));
  EXPECT_EQ(r.token_prompts, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  ASSERT_FALSE(parse_completion_request(R"({"prompt": [[1], [2, 3]], "n": 2})", {}, &r));
  EXPECT_EQ(r.token_prompts.size(), 2u);
  EXPECT_EQ(r.num_prompts(), 2);
}

struct BadCase {
  const char* body;
  const char* param;  // expected param ("" = null)
};

TEST(OpenAiJson, BadChatRequestsAre400WithTheField) {
  const BadCase cases[] = {
      {"", ""},
      {"{", ""},
      {"[]", ""},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [{"role": "user"}]})", "messages"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 1e400})", ""},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 101})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_k": -2})", "top_k"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 18446744073709551615})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -9223372036854775808})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e300})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 129})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"-1": 1}})", "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1x": 1}})", "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"99999999999": 1}})", "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": "a"}})", "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "seed": "x"})", "seed"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21, "logprobs": true})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "grammar"}})",
       "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})",
       "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
          "json_schema": {"name": "x", "schema": 3}}})", "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "min_tokens": 10, "max_tokens": 5})", "min_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "best_of": 3})", "best_of"},
      // vLLM extensions that would change the output and are not implemented are refused, not
      // ignored; malformed structured-output fields are named.
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": 3})", "guided_regex"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": ""})", "guided_regex"},
      {R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"structural_tag": "x"}})", "structured_outputs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"grammar": 3}})", "structured_outputs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": "root ::= x"})", "structured_outputs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"json": {}, "regex": "a"}})", "structured_outputs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_grammar": 3})", "guided_grammar"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_grammar": ""})", "guided_grammar"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": "a", "guided_grammar": "root ::= \"a\""})", "guided_grammar"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_json": 3})", "guided_json"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_json": "{bad"})", "guided_json"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_choice": []})", "guided_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_choice": ["a", 1]})", "guided_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_json": {"type": "object"},
          "guided_choice": ["a"]})", "guided_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 21})", "prompt_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": -1})", "prompt_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1.5})", "prompt_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1, "stream": true})",
       "prompt_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", "echo"},
      {R"({"messages": [{"role": "user", "content": "x"}], "truncate_prompt_tokens": 0})", "truncate_prompt_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "truncate_prompt_tokens": -1})", "truncate_prompt_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "truncate_prompt_tokens": 2.5})", "truncate_prompt_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "truncate_prompt_tokens": "4"})", "truncate_prompt_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})",
       "continue_final_message"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required", "tools": []})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "include_stop_str_in_output": "yes"})",
       "include_stop_str_in_output"},
  };
  for (const BadCase& c : cases) {
    ApiRequest r;
    auto err = parse_chat_request(c.body, RequestLimits{}, &r);
    ASSERT_TRUE(err.has_value()) << c.body;
    EXPECT_EQ(err->status, 400) << c.body;
    EXPECT_EQ(err->param, c.param) << c.body << " -> " << err->message;
    EXPECT_FALSE(err->message.empty());
    const Json env = error_json(*err);
    EXPECT_EQ(env["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(env["error"]["code"].is_string()) << env.dump();
  }
}

// Structured outputs: each way of asking gives its OutputFormat; a schema keeps its written
// property order (the body's own order, not the sorted one).
TEST(OpenAiJson, StructuredOutputFormats) {
  using structured::OutputFormat;
  ApiRequest r;
  ASSERT_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_object"}})", RequestLimits{}, &r).has_value());
  ASSERT_TRUE(r.output_format.has_value());
  EXPECT_EQ(r.output_format->kind, OutputFormat::Kind::kJsonObject);
  EXPECT_EQ(r.output_format_field, "response_format");
  ASSERT_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
        "schema": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}}})",
      RequestLimits{}, &r).has_value());
  ASSERT_TRUE(r.output_format.has_value());
  EXPECT_EQ(r.output_format->kind, OutputFormat::Kind::kJsonSchema);
  EXPECT_EQ(r.output_format->schema["properties"].begin().key(), "zeta");
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "guided_json": "{\"type\": \"boolean\"}"})",
                                        RequestLimits{}, &r).has_value());
  ASSERT_TRUE(r.output_format.has_value());
  EXPECT_EQ(r.output_format->schema["type"], "boolean");
  EXPECT_EQ(r.output_format_field, "guided_json");
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "guided_choice": ["yes", "no"]})", RequestLimits{}, &r)
                   .has_value());
  ASSERT_TRUE(r.output_format.has_value());
  EXPECT_EQ(r.output_format->choices, (std::vector<std::string>{"yes", "no"}));
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "guided_regex": "[0-9]+"})", RequestLimits{}, &r).has_value());
  ASSERT_TRUE(r.output_format.has_value());
  EXPECT_EQ(r.output_format->kind, OutputFormat::Kind::kRegex);
  EXPECT_EQ(r.output_format->pattern, "[0-9]+");
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "guided_grammar": "root ::= [a-z]+"})", RequestLimits{}, &r)
                   .has_value());
  ASSERT_TRUE(r.output_format.has_value());
  EXPECT_EQ(r.output_format->kind, OutputFormat::Kind::kGrammar);
  EXPECT_EQ(r.output_format->grammar, "root ::= [a-z]+");
  EXPECT_EQ(r.output_format_field, "guided_grammar");
  // vLLM's structured_outputs: the same formats under json / choice / regex / grammar / json_object.
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "structured_outputs": {"grammar": "root ::= \"a\""}})",
                                        RequestLimits{}, &r).has_value());
  ASSERT_TRUE(r.output_format.has_value());
  EXPECT_EQ(r.output_format->kind, OutputFormat::Kind::kGrammar);
  EXPECT_EQ(r.output_format_field, "structured_outputs");
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "structured_outputs": {"choice": ["a", "b"]}})",
                                        RequestLimits{}, &r).has_value());
  EXPECT_EQ(r.output_format->choices, (std::vector<std::string>{"a", "b"}));
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "structured_outputs": {"regex": "b+"}})", RequestLimits{}, &r)
                   .has_value());
  EXPECT_EQ(r.output_format->kind, OutputFormat::Kind::kRegex);
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "structured_outputs": {"json_object": true}})",
                                        RequestLimits{}, &r).has_value());
  EXPECT_EQ(r.output_format->kind, OutputFormat::Kind::kJsonObject);
  ASSERT_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"json":
      {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}})",
                                  RequestLimits{}, &r).has_value());
  EXPECT_EQ(r.output_format->kind, OutputFormat::Kind::kJsonSchema);
  EXPECT_EQ(r.output_format->schema["properties"].begin().key(), "zeta");
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "response_format": {"type": "text"}})", RequestLimits{}, &r)
                   .has_value());
  EXPECT_FALSE(r.output_format.has_value());
}

// Clients that send the extensions' defaults (null, false, 0, tool_choice "none") are served.
TEST(OpenAiJson, ExtensionDefaultsAndIncludeStopAreAccepted) {
  ApiRequest r;
  auto err = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "x"}], "guided_json": null, "prompt_logprobs": 0,
          "continue_final_message": false, "tool_choice": "none", "include_stop_str_in_output": true,
          "stop": ["."]})",
      RequestLimits{}, &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  EXPECT_TRUE(r.params.include_stop_str_in_output);
  EXPECT_EQ(r.params.prompt_logprobs, 0);  // 0 asks for the prompt tokens' own logprobs
  ApiRequest c;
  EXPECT_FALSE(parse_completion_request(R"({"prompt": "x"})", RequestLimits{}, &c).has_value());
  EXPECT_FALSE(c.params.include_stop_str_in_output);
}

// vLLM's continue_final_message: parsed with add_generation_prompt off (both on is 400, above),
// for chat requests and /tokenize alike.
TEST(OpenAiJson, ContinueFinalMessageNeedsTheGenerationPromptOff) {
  ApiRequest r;
  auto err = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
          "add_generation_prompt": false, "continue_final_message": true})",
      RequestLimits{}, &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_TRUE(r.continue_final_message);
  ASSERT_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}]})", RequestLimits{}, &r));
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_FALSE(r.continue_final_message);
  TokenizeRequest t;
  ASSERT_FALSE(parse_tokenize_request(R"({"messages": [{"role": "assistant", "content": "y"}],
                                          "add_generation_prompt": false, "continue_final_message": true})",
                                      RequestLimits{}, &t));
  EXPECT_TRUE(t.continue_final_message);
  auto bad = parse_tokenize_request(R"({"messages": [{"role": "assistant", "content": "y"}],
                                        "continue_final_message": true})",
                                    RequestLimits{}, &t);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->param, "continue_final_message");
}

// echo and prompt_logprobs on completions: echo with logprobs scores the prompt with as many
// alternatives as either field asks for; prompt_logprobs alone does not touch logprobs.
TEST(OpenAiJson, EchoAndPromptLogprobsMapToSamplingParams) {
  ApiRequest r;
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "echo": true})", RequestLimits{}, &r).has_value());
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.params.prompt_logprobs, -1);
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "echo": true, "logprobs": 3})", RequestLimits{}, &r));
  EXPECT_EQ(r.params.prompt_logprobs, 3);
  EXPECT_EQ(r.prompt_logprobs, -1);
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "echo": true, "logprobs": 1, "prompt_logprobs": 4})",
                                        RequestLimits{}, &r));
  EXPECT_EQ(r.params.prompt_logprobs, 4);
  EXPECT_EQ(r.prompt_logprobs, 4);
  EXPECT_EQ(r.params.logprobs, 1);
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "prompt_logprobs": 2})", RequestLimits{}, &r));
  EXPECT_EQ(r.params.prompt_logprobs, 2);
  EXPECT_EQ(r.params.logprobs, -1);
  EXPECT_FALSE(r.echo);
  auto err = parse_completion_request(R"({"prompt": "x", "echo": 1})", RequestLimits{}, &r);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->param, "echo");
  err = parse_completion_request(R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})", RequestLimits{}, &r);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->param, "prompt_logprobs");
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "truncate_prompt_tokens": 7})", RequestLimits{}, &r));
  EXPECT_EQ(r.truncate_prompt_tokens, 7);
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "x", "truncate_prompt_tokens": 3.0})", RequestLimits{}, &r));
  EXPECT_EQ(r.truncate_prompt_tokens, 3);
  Usage u;
  EXPECT_FALSE(usage_json(u).contains("truncated_prompt_tokens"));
  u.truncated_prompt_tokens = 5;
  EXPECT_EQ(usage_json(u)["truncated_prompt_tokens"], 5);
}

// vLLM's layouts: prompt_logprobs starts with null, then {id: {logprob, rank, decoded_token}}
// with the actual token first; echo's first prompt token has a null logprob.
TEST(OpenAiJson, PromptLogprobsAndEchoLogprobsLayouts) {
  std::vector<PromptPosition> pos(2);
  pos[0].actual = {7, -1.5f, 3, "a"};
  pos[0].top = {{9, -0.5f, 1, "b"}, {7, -1.5f, 2, "a"}};
  pos[1].actual = {9, -0.25f, 1, "b"};
  const Json j = prompt_logprobs_json(pos);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_TRUE(j[0].is_null());
  EXPECT_EQ(j[1].size(), 2u);  // the actual token is not repeated
  EXPECT_EQ(j[1].begin().key(), "7");
  EXPECT_EQ(j[1]["7"]["rank"], 3);
  EXPECT_EQ(j[1]["9"]["decoded_token"], "b");
  EXPECT_DOUBLE_EQ(j[2]["9"]["logprob"].get<double>(), -0.25);
  std::vector<TokenLogprobInfo> entries(2);
  entries[0].token = "He";
  entries[0].null_logprob = true;
  entries[1].token = "llo";
  entries[1].logprob = -2.0f;
  const Json c = completion_logprobs_json(entries, 0);
  EXPECT_TRUE(c["token_logprobs"][0].is_null());
  EXPECT_TRUE(c["top_logprobs"][0].is_null());
  EXPECT_EQ(c["token_logprobs"][1], -2.0);
  EXPECT_EQ(c["text_offset"], (Json{0, 2}));
  ChoiceResult choice{0, "x", {}, "stop"};
  choice.with_prompt_logprobs = true;
  choice.prompt_logprobs = j;
  ResponseMeta meta{"cmpl-x", 1, "m"};
  EXPECT_EQ(completion_response_json(meta, {choice}, false, Usage{})["choices"][0]["prompt_logprobs"], j);
  EXPECT_EQ(chat_response_json(meta, {choice}, false, Usage{})["prompt_logprobs"], j);
  EXPECT_FALSE(completion_response_json(meta, {ChoiceResult{}}, false, Usage{})["choices"][0].contains("prompt_logprobs"));
}

// OpenAI sends `code` as a string (or null); one type on every path, a default per status.
TEST(OpenAiJson, ErrorCodeIsAlwaysAString) {
  EXPECT_EQ(error_json(bad_request("x"))["error"]["code"], "invalid_request");
  EXPECT_EQ(error_json(not_found("x"))["error"]["code"], "not_found");
  EXPECT_EQ(error_json(server_error(503, "x", "service_unavailable"))["error"]["code"], "service_unavailable");
  EXPECT_EQ(error_json(ApiError{413, "x", "invalid_request_error", "", ""})["error"]["code"], "request_too_large");
  EXPECT_EQ(error_json(ApiError{418, "x", "invalid_request_error", "", ""})["error"]["code"], "invalid_request");
  EXPECT_EQ(error_json(ApiError{502, "x", "internal_error", "", ""})["error"]["code"], "server_error");
  EXPECT_EQ(error_json(bad_request("x", "prompt", "context_length_exceeded"))["error"]["code"],
            "context_length_exceeded");
}

TEST(OpenAiJson, DepthAndSizeLimits) {
  RequestLimits lim;
  std::string deep = R"({"messages": )" + std::string(10000, '[') + std::string(10000, ']') + "}";
  ApiRequest r;
  auto err = parse_chat_request(deep, lim, &r);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("nested"), std::string::npos);
  // Brackets inside strings do not count.
  std::string in_string = R"({"messages": [{"role": "user", "content": ")" + std::string(1000, '[') + R"("}]})";
  EXPECT_FALSE(parse_chat_request(in_string, lim, &r));
  json many = {{"prompt", "x"}, {"stop", json::array()}};
  for (int i = 0; i < 17; ++i) many["stop"].push_back("s" + std::to_string(i));
  err = parse_completion_request(many.dump(), lim, &r);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "stop");
  json prompts = {{"prompt", json::array()}, {"n", 2}};
  for (int i = 0; i < 200; ++i) prompts["prompt"].push_back("p");
  err = parse_completion_request(prompts.dump(), lim, &r);  // 400 choices > 256
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "n");
}

// A random JSON value of any type, including extreme numbers and odd strings.
json random_value(std::mt19937_64& rng, int depth = 0) {
  switch (rng() % (depth > 2 ? 9 : 11)) {
    case 0: return nullptr;
    case 1: return static_cast<bool>(rng() & 1);
    case 2: return static_cast<int64_t>(rng());
    case 3: return static_cast<uint64_t>(rng());
    case 4: {
      const double specials[] = {0.0, -0.0, 1e308, -1e308, 0.5, 2.0, -1.0, 1e-310, 100.0, 3.0};
      return specials[rng() % 10];
    }
    case 5: return static_cast<int64_t>(rng() % 300) - 50;
    case 6: return std::string(rng() % 40, static_cast<char>('a' + rng() % 26));
    case 7: return std::to_string(static_cast<int64_t>(rng() % 70000) - 10);
    case 8: return std::string("\x7f\x01\xe2\x82\xac", 5);
    case 9: {
      json a = json::array();
      for (int i = rng() % 5; i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = rng() % 4; i > 0; --i) o[std::to_string(rng() % 20)] = random_value(rng, depth + 1);
      if (rng() & 1) o["type"] = (rng() & 1) ? "text" : "json_object";
      if (rng() & 1) o["include_usage"] = random_value(rng, depth + 1);
      return o;
    }
  }
}

void check_outcome(const std::optional<ApiError>& err, const ApiRequest& r, const std::string& body) {
  if (err) {
    ASSERT_EQ(err->status, 400) << body;
    ASSERT_FALSE(err->message.empty()) << body;
    (void)dump_json(error_json(*err));
    return;
  }
  // Accepted: the engine's own validation must agree (the session fills max_tokens when unset).
  SamplingParams p = r.params;
  if (!r.max_tokens_set) p.max_tokens = std::max(p.max_tokens, p.min_tokens);
  Status st = p.validate(std::numeric_limits<int32_t>::max(), RequestLimits{}.max_logprobs);
  ASSERT_TRUE(st.ok()) << st.message() << " for " << body;
  ASSERT_LE(static_cast<int64_t>(p.n) * r.num_prompts(), RequestLimits{}.max_choices);
}

TEST(OpenAiJson, RandomizedMutationsNeverCrashAndFailAs400) {
  const std::vector<std::string> seeds = {
      R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7, "max_tokens": 8,
          "n": 2, "stop": ["a", "b"], "logit_bias": {"5": 1}, "logprobs": true, "top_logprobs": 2,
          "stream": true, "stream_options": {"include_usage": true}, "seed": 3})",
      R"({"prompt": [[1, 2], [3]], "max_tokens": 4, "logprobs": 1, "top_p": 0.5, "top_k": 3, "min_p": 0.1,
          "presence_penalty": 1, "frequency_penalty": 1, "repetition_penalty": 1.2, "stop_token_ids": [7]})",
      R"({"prompt": "text", "echo": false, "suffix": null, "response_format": {"type": "text"}, "min_tokens": 2})",
  };
  const std::vector<std::string> keys = {"model", "messages", "prompt", "temperature", "top_p", "top_k", "min_p",
                                         "max_tokens", "max_completion_tokens", "min_tokens", "n", "best_of", "stop",
                                         "stop_token_ids", "seed", "logit_bias", "logprobs", "top_logprobs",
                                         "stream", "stream_options", "response_format", "tools", "ignore_eos",
                                         "presence_penalty", "frequency_penalty", "repetition_penalty", "echo",
                                         "suffix", "user", "add_generation_prompt"};
  std::mt19937_64 rng(20240601);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string body = seeds[rng() % seeds.size()];
    if (iter % 2 == 0) {
      // Structural: replace or add fields with random values, sometimes inside messages.
      json j = json::parse(body);
      for (int m = 1 + rng() % 3; m > 0; --m) {
        const std::string& k = keys[rng() % keys.size()];
        j[k] = random_value(rng);
      }
      if (j.contains("messages") && j["messages"].is_array() && !j["messages"].empty() &&
          j["messages"][0].is_object() && (rng() & 1))
        j["messages"][0][(rng() & 1) ? "content" : "role"] = random_value(rng);
      body = j.dump();
    } else {
      // Byte level: flips, insertions, deletions, truncation.
      for (int m = 1 + rng() % 4; m > 0; --m) {
        const size_t pos = rng() % (body.size() + 1);
        switch (rng() % 4) {
          case 0: if (pos < body.size()) body[pos] = static_cast<char>(rng()); break;
          case 1: body.insert(pos, 1, "{}[]\",:0-e9\\"[rng() % 12]); break;
          case 2: if (pos < body.size()) body.erase(pos, 1 + rng() % 8); break;
          default: body.resize(pos); break;
        }
      }
    }
    for (int which = 0; which < 2; ++which) {
      ApiRequest r;
      auto err = which == 0 ? parse_chat_request(body, RequestLimits{}, &r)
                            : parse_completion_request(body, RequestLimits{}, &r);
      check_outcome(err, r, body);
      if (HasFatalFailure()) return;
      (err ? rejected : accepted)++;
    }
  }
  // Both outcomes must be exercised, or the mutations are too weak or too strong.
  EXPECT_GT(accepted, 300);
  EXPECT_GT(rejected, 3000);
}

TEST(OpenAiJson, ResponsesHaveOpenAiShapes) {
  ResponseMeta meta{"chatcmpl-x", 123, "m"};
  ChoiceResult c{0, "hi", {{"h", -0.5f, {{"h", -0.5f}, {"x", -2.0f}}}}, "stop"};
  Usage u{5, 1, 4};
  Json r = chat_response_json(meta, {c}, true, u);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "x");
  EXPECT_EQ(r["usage"]["total_tokens"], 6);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  Json cr = completion_response_json(meta, {c}, true, u);
  EXPECT_EQ(cr["choices"][0]["logprobs"]["tokens"][0], "h");
  EXPECT_EQ(cr["choices"][0]["logprobs"]["top_logprobs"][0]["x"], -2.0);
  ChunkFields f;
  f.role = true;
  Json null_usage = nullptr;
  Json ch = chat_chunk_json(meta, f, &null_usage);
  EXPECT_EQ(ch["choices"][0]["delta"], (Json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(ch["usage"].is_null());
  EXPECT_TRUE(ch["choices"][0]["finish_reason"].is_null());
  Json last = usage_chunk_json(meta, true, u);
  EXPECT_TRUE(last["choices"].empty());
  // A partial UTF-8 token text must not break serialization.
  ChoiceResult partial{0, std::string("\xe2\x82", 2), {}, "length"};
  EXPECT_NO_THROW(dump_json(chat_response_json(meta, {partial}, false, u)));
  EXPECT_EQ(new_response_id("cmpl-").rfind("cmpl-", 0), 0u);
  EXPECT_NE(new_response_id("a"), new_response_id("a"));
}

TEST(Sse, Framing) {
  EXPECT_EQ(sse_data(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_comment("x\ny"), ": x y\n\n");
  EXPECT_EQ(sse_error(bad_request("m", "p")).rfind("data: {\"error\":{\"message\":\"m\"", 0), 0u);
}

TEST(Auth, BearerKeys) {
  EXPECT_TRUE(authorized("", ""));
  EXPECT_TRUE(authorized("Bearer k1", "k1"));
  EXPECT_FALSE(authorized("Bearer k2", "k1"));
  EXPECT_FALSE(authorized("Bearer k1x", "k1"));
  EXPECT_FALSE(authorized("k1", "k1"));
  EXPECT_FALSE(authorized("", "k1"));
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
}

TEST(Metrics, PrometheusExposition) {
  Metrics m;
  RequestObservation obs;
  obs.ttft_s = 0.05;
  obs.itl_s = {0.02, 0.03};
  obs.e2e_s = 0.1;
  obs.prompt_tokens = 7;
  obs.generation_tokens = 3;
  obs.finish_reason = "length";
  m.record(obs);
  EngineStats st;
  st.num_running = 2;
  st.kv_usage = 0.25;
  const std::string text = m.render("smol", st, 1);
  EXPECT_NE(text.find("vllm:num_requests_running{model_name=\"smol\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:kv_cache_usage_perc{model_name=\"smol\"} 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("vllm:prompt_tokens_total{model_name=\"smol\"} 7\n"), std::string::npos);
  EXPECT_NE(text.find("vllm:request_success_total{model_name=\"smol\",finished_reason=\"length\"} 1\n"),
            std::string::npos);
  // Cumulative buckets: 0.05 falls in le=0.06 but not le=0.04.
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.04\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("vllm:inter_token_latency_seconds_count{model_name=\"smol\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("vllm:time_per_output_token_seconds_sum{model_name=\"smol\"} 0.025"), std::string::npos);
}

TEST(Metrics, KvOffloadCountersInBlocks) {
  Metrics m;
  EngineStats st;
  st.kv_offload.enabled = true;
  st.kv_offload.connected = true;
  st.kv_offload.queried_blocks = 130;
  st.kv_offload.hit_blocks = 124;
  st.kv_offload.stored_blocks = 126;
  st.kv_offload.store_drops = 3;
  st.kv_offload.corrupt_entries = 1;
  const std::string text = m.render("smol", st, 0);
  EXPECT_NE(text.find("# TYPE lancet:kv_offload_hits_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lancet:kv_offload_hits_total{model_name=\"smol\"} 124\n"), std::string::npos);
  EXPECT_NE(text.find("lancet:kv_offload_queries_total{model_name=\"smol\"} 130\n"), std::string::npos);
  EXPECT_NE(text.find("lancet:kv_offload_stored_total{model_name=\"smol\"} 126\n"), std::string::npos);
  EXPECT_NE(text.find("lancet:kv_offload_store_drops_total{model_name=\"smol\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("lancet:kv_offload_corrupt_total{model_name=\"smol\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("lancet:kv_offload_connected{model_name=\"smol\"} 1\n"), std::string::npos);
  // Without the tier the series exist at zero, so rules over them always have an input.
  const std::string off = m.render("smol", EngineStats{}, 0);
  EXPECT_NE(off.find("lancet:kv_offload_queries_total{model_name=\"smol\"} 0\n"), std::string::npos);
}

}  // namespace
}  // namespace lancet::server
