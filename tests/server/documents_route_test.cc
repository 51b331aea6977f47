// POST /v1/lancet/documents on the default model: a 3-page PDF made here (sent as base64) is
// answered with one block per page and citations that all name blocks of it; extract samples
// under the schema, so its JSON is valid; a text past the context is a 400 saying how much does
// not fit; unknown fields, a bad base64 body and a corrupt PDF are 400s naming their field.
// decode_base64 against an encoder written here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "documents/pdf_maker.h"
#include "server/documents_api.h"
#include "server_process.h"
#include "test_paths.h"

namespace lancet::testing {
namespace {

std::string encode_base64(const std::string& in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8) |
                       static_cast<uint8_t>(in[i + 2]);
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  if (i < in.size()) {
    const bool two = i + 1 < in.size();
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (two ? static_cast<uint8_t>(in[i + 1]) << 8 : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += two ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

TEST(DocumentsRoute, DecodeBase64) {
  for (const std::string s : {std::string(""), std::string("a"), std::string("ab"), std::string("abc"),
                              std::string("\x00\xff\x10 pdf", 7), make_pdf({{"One line."}})}) {
    auto d = server::decode_base64(encode_base64(s));
    ASSERT_TRUE(d.has_value()) << s;
    EXPECT_EQ(*d, s);
  }
  EXPECT_EQ(*server::decode_base64("YW Jj\nZA=="), "abcd");  // whitespace skipped
  EXPECT_EQ(*server::decode_base64("YWI"), "ab");             // padding optional
  EXPECT_FALSE(server::decode_base64("YW*i").has_value());
  EXPECT_FALSE(server::decode_base64("YQ==YQ").has_value());  // data after the padding
  EXPECT_FALSE(server::decode_base64("Y").has_value());       // a lone sextet
}

class DocumentsRouteServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(default_model().empty()) << "default model missing (tools/fetch_model.sh)";
    std::string err;
    ASSERT_TRUE(server_.start({default_model(), "--max-model-len", "1024", "--kv-cache-memory", "268435456",
                               "--threads", "2"},
                              &err) &&
                server_.wait_healthy(60, &err))
        << err;
    cli_ = std::make_unique<httplib::Client>("127.0.0.1", server_.port());
    cli_->set_read_timeout(120);
  }
  nlohmann::json post(const nlohmann::json& body, int* status) {
    auto r = cli_->Post("/v1/lancet/documents", body.dump(), "application/json");
    *status = r ? r->status : -1;
    return r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
  }
  ServerProcess server_;
  std::unique_ptr<httplib::Client> cli_;
};

const std::vector<std::vector<std::string>> kPages = {
    {"The harbour of Kellin was built in 1820.", "Its lighthouse is painted red and white."},
    {"The town has four thousand inhabitants.", "Most of them work in fishing or on the ferries."},
    {"The ferry to the island leaves every day at nine.", "Tickets cost twelve euros."}};

TEST_F(DocumentsRouteServer, AskAndExtractFromAPdf) {
  const std::string pdf = encode_base64(make_pdf(kPages));
  int status = 0;
  auto j = post({{"task", "ask"}, {"question", "When does the ferry leave?"}, {"pdf_base64", pdf}, {"max_tokens", 40}},
                &status);
  ASSERT_EQ(status, 200) << j.dump();
  EXPECT_EQ(j["object"], "lancet.document");
  ASSERT_EQ(j["blocks"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["blocks"][i]["page"], i + 1);
  EXPECT_EQ(j["blocks"][2]["text"], "The ferry to the island leaves every day at nine. Tickets cost twelve euros.");
  EXPECT_FALSE(j["answer"].get<std::string>().empty());
  EXPECT_TRUE(j["unknown_cited_blocks"].empty()) << j.dump();
  EXPECT_EQ(j["usage"]["prompt_tokens"], j["prompt_tokens"]);
  EXPECT_GT(j["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 40);

  const nlohmann::json schema = {
      {"type", "object"},
      {"required", {"town", "year"}},
      {"properties", {{"town", {{"type", "string"}, {"maxLength", 20}}},
                      {"year", {{"type", "integer"}, {"minimum", 1000}, {"maximum", 2100}}}}},
      {"additionalProperties", false}};
  j = post({{"task", "extract"}, {"schema", schema}, {"pdf_base64", pdf}, {"max_tokens", 60}}, &status);
  ASSERT_EQ(status, 200) << j.dump();
  EXPECT_EQ(j["valid"], true) << j.dump();
  EXPECT_TRUE(j["json"]["town"].is_string()) << j.dump();
  EXPECT_LE(j["json"]["town"].get<std::string>().size(), 20u);
  ASSERT_TRUE(j["json"]["year"].is_number_integer()) << j.dump();
  EXPECT_GE(j["json"]["year"].get<int>(), 1000);
  EXPECT_LE(j["json"]["year"].get<int>(), 2100);
  EXPECT_EQ(j["finish_reason"], "stop") << j.dump();
}

TEST_F(DocumentsRouteServer, BadRequestsNameTheirField) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "Sentence " + std::to_string(i) + " says the day was mild and dry. ";
  int status = 0;
  auto j = post({{"task", "summarize"}, {"text", text}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(j["error"]["code"], "context_length_exceeded") << j.dump();
  EXPECT_NE(j["error"]["message"].get<std::string>().find("do not fit. Nothing was cut"), std::string::npos) << j.dump();
  const std::pair<nlohmann::json, const char*> cases[] = {
      {{{"task", "summarize"}, {"text", "Hi."}, {"temperature", 1}}, "temperature"},
      {{{"task", "translate"}, {"text", "Hi."}}, "task"},
      {{{"task", "ask"}, {"text", "Hi."}}, "task"},
      {{{"task", "extract"}, {"text", "Hi."}}, "schema"},
      {{{"task", "summarize"}}, "text"},
      {{{"task", "summarize"}, {"text", "Hi."}, {"pdf_base64", "SGk="}}, "text"},
      {{{"task", "summarize"}, {"pdf_base64", "not base64!"}}, "pdf_base64"},
      {{{"task", "summarize"}, {"pdf_base64", encode_base64(make_pdf(kPages).substr(0, 60))}}, "pdf_base64"},
      {{{"task", "summarize"}, {"text", "Hi."}, {"max_tokens", 0}}, "max_tokens"},
      {{{"task", "extract"}, {"text", "Hi."}, {"schema", {{"type", "string"}, {"format", "email"}}}}, "schema"},
  };
  for (const auto& [body, param] : cases) {
    j = post(body, &status);
    EXPECT_EQ(status, 400) << body.dump() << " -> " << j.dump();
    EXPECT_EQ(j["error"]["param"], param) << body.dump() << " -> " << j.dump();
  }
  // The server keeps serving.
  j = post({{"task", "summarize"}, {"text", "The sky was clear. The sea was calm."}, {"max_tokens", 8}}, &status);
  EXPECT_EQ(status, 200) << j.dump();
}

}  // namespace
}  // namespace lancet::testing
