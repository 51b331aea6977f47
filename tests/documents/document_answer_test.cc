// The document task pipeline without a model: the task names, blocks and prompt over a model
// that counts words and encodes a chat as one id per word, the context check, and the result
// object's citation and JSON checks.
#include "documents/document_answer.h"

#include <gtest/gtest.h>

#include <sstream>

namespace lancet::documents {
namespace {

int64_t words(const std::string& t) {
  std::istringstream s(t);
  int64_t n = 0;
  for (std::string w; s >> w;) ++n;
  return n;
}

DocModel word_model(int64_t max_model_len) {
  DocModel m;
  m.count_tokens = words;
  m.encode_chat = [](const nlohmann::ordered_json& msgs) -> StatusOr<std::vector<int32_t>> {
    int64_t n = 0;
    for (const auto& msg : msgs) n += words(msg["content"].get<std::string>()) + 2;
    return std::vector<int32_t>(static_cast<size_t>(n), 7);
  };
  m.max_model_len = max_model_len;
  return m;
}

TEST(DocumentAnswer, TaskNames) {
  EXPECT_EQ(make_doc_request("summarize", "", nullptr)->task, DocTask::kSummarize);
  EXPECT_EQ(make_doc_request("ask", "Why?", nullptr)->question, "Why?");
  EXPECT_EQ(make_doc_request("extract", "", {{"type", "object"}})->task, DocTask::kExtract);
  EXPECT_EQ(make_doc_request("ask", "", nullptr).status().message(), "ask needs a question");
  EXPECT_EQ(make_doc_request("extract", "", nullptr).status().message(),
            "extract needs a schema (a JSON Schema object)");
  EXPECT_EQ(make_doc_request("translate", "", nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST(DocumentAnswer, PromptFitsOrSaysWhatDoesNot) {
  DocumentText doc;
  doc.pages = {"The first page has one sentence. And a second one.", "Page two is short."};
  const DocRequest req = *make_doc_request("summarize", "", nullptr);
  auto p = build_document_prompt(doc, req, 64, 16, word_model(4096));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->blocks.size(), 2u);
  EXPECT_EQ(p->blocks[1].page, 2);
  EXPECT_GT(p->ids.size(), 10u);
  // A context that holds the prompt but not the answer's budget on top.
  auto q = build_document_prompt(doc, req, 64, 16, word_model(static_cast<int64_t>(p->ids.size()) + 15));
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(q.status().message().find("Nothing was cut"), std::string::npos) << q.status().message();
  DocumentText empty;
  empty.pages = {"   "};
  EXPECT_EQ(build_document_prompt(empty, req, 64, 16, word_model(4096)).status().message(), "the document has no text");
}

TEST(DocumentAnswer, ResultChecksCitationsAndJson) {
  std::vector<ContextBlock> blocks(2);
  blocks[0].id = 1;
  blocks[1].id = 2;
  bool ok = false;
  const DocRequest ask = *make_doc_request("ask", "Which?", nullptr);
  auto j = document_result(blocks, "See [CONTEXT_BLOCK_ID:002] and [CONTEXT_BLOCK_ID:009].", ask, 30, &ok);
  EXPECT_TRUE(ok);
  EXPECT_EQ(j["cited_blocks"], nlohmann::json({2, 9}));
  EXPECT_EQ(j["unknown_cited_blocks"], nlohmann::json({9}));
  EXPECT_EQ(j["prompt_tokens"], 30);
  const DocRequest ex = *make_doc_request("extract", "", {{"type", "object"}, {"required", {"n"}}});
  j = document_result(blocks, R"({"n": 3})", ex, 30, &ok);
  EXPECT_TRUE(ok);
  EXPECT_EQ(j["json"]["n"], 3);
  j = document_result(blocks, R"({"m": 3})", ex, 30, &ok);
  EXPECT_FALSE(ok);
  EXPECT_EQ(j["valid"], false);
}

}  // namespace
}  // namespace lancet::documents
