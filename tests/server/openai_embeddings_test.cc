// /v1/embeddings JSON in process: every input form, encoding_format, the fields refused with a
// 400 naming them, the response layout, and base64 against known bytes.
#include "server/openai_embeddings.h"

#include <gtest/gtest.h>

namespace lancet::server {
namespace {

TEST(OpenAiEmbeddings, InputForms) {
  EmbeddingRequest r;
  ASSERT_FALSE(parse_embedding_request(R"({"input": "hi", "model": "m"})", RequestLimits{}, &r));
  EXPECT_EQ(r.texts, (std::vector<std::string>{"hi"}));
  EXPECT_EQ(r.model, "m");
  EXPECT_FALSE(r.base64);
  ASSERT_FALSE(parse_embedding_request(R"({"input": ["a", "b"], "encoding_format": "base64"})", RequestLimits{}, &r));
  EXPECT_EQ(r.num_inputs(), 2u);
  EXPECT_TRUE(r.base64);
  ASSERT_FALSE(parse_embedding_request(R"({"input": [1, 2, 3.0]})", RequestLimits{}, &r));
  EXPECT_EQ(r.token_inputs, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  ASSERT_FALSE(parse_embedding_request(R"({"input": [[1], [2, 3]], "dimensions": null})", RequestLimits{}, &r));
  EXPECT_EQ(r.token_inputs.size(), 2u);
  EXPECT_TRUE(r.texts.empty());
}

TEST(OpenAiEmbeddings, BadRequestsAre400WithTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "input"},
      {R"({"input": null})", "input"},
      {R"({"input": ""})", "input"},
      {R"({"input": []})", "input"},
      {R"({"input": 3})", "input"},
      {R"({"input": [1, "a"]})", "input"},
      {R"({"input": ["a", 1]})", "input"},
      {R"({"input": [[1], "a"]})", "input"},
      {R"({"input": [[]]})", "input"},
      {R"({"input": [-1]})", "input"},
      {R"({"input": [1.5]})", "input"},
      {R"({"input": [3000000000]})", "input"},
      {R"({"input": "x", "dimensions": 16})", "dimensions"},
      {R"({"input": "x", "encoding_format": "int8"})", "encoding_format"},
      {R"({"input": "x", "encoding_format": 1})", "encoding_format"},
      {R"({"input": "x", "model": 1})", "model"},
      {R"({"input": "x", "user": 1})", "user"},
      {R"([1])", ""},
  };
  for (const auto& [body, param] : cases) {
    EmbeddingRequest r;
    auto err = parse_embedding_request(body, RequestLimits{}, &r);
    ASSERT_TRUE(err.has_value()) << body;
    EXPECT_EQ(err->status, 400) << body;
    EXPECT_EQ(err->param, param) << body << " -> " << err->message;
  }
  RequestLimits lim;
  lim.max_prompts = 2;
  EmbeddingRequest r;
  auto err = parse_embedding_request(R"({"input": ["a", "b", "c"]})", lim, &r);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->param, "input");
}

TEST(OpenAiEmbeddings, ResponseAndBase64) {
  // 1.0f = 00 00 80 3f, -2.0f = 00 00 00 c0 (little-endian).
  EXPECT_EQ(floats_base64({1.0f}), "AACAPw==");
  EXPECT_EQ(floats_base64({1.0f, -2.0f}), "AACAPwAAAMA=");
  EXPECT_EQ(floats_base64({}), "");
  const Json f = embeddings_response_json("m", {{0.6f, 0.8f}, {1.0f, 0.0f}}, false, 7);
  EXPECT_EQ(f["object"], "list");
  EXPECT_EQ(f["model"], "m");
  ASSERT_EQ(f["data"].size(), 2u);
  EXPECT_EQ(f["data"][1]["object"], "embedding");
  EXPECT_EQ(f["data"][1]["index"], 1);
  EXPECT_FLOAT_EQ(f["data"][0]["embedding"][1].get<float>(), 0.8f);
  EXPECT_EQ(f["usage"], (Json{{"prompt_tokens", 7}, {"total_tokens", 7}}));
  const Json b = embeddings_response_json("m", {{1.0f}}, true, 1);
  EXPECT_EQ(b["data"][0]["embedding"], "AACAPw==");
}

}  // namespace
}  // namespace lancet::server
